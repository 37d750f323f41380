"""Make ``inductor_testing`` (the hand-built prims graph helpers) importable by the tests."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
