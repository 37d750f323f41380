"""Make ``aot_testing`` (models and the eager-vs-compiled checker) importable by the tests."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
