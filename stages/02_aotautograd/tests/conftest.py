"""Make ``aot_testing`` (the eager-vs-compiled checker) and ``workload_models`` importable
by the tests."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
