"""``python -m driver ...``: see driver/cli.py."""

import sys

from driver.cli import main

sys.exit(main())
