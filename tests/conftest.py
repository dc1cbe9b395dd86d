"""Shared test set-up: quiet TensorFlow, import paths, reproducible seeds."""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# Tests never touch the network: TFDS must not try to reach GCS.
os.environ.setdefault('TFDS_DISABLE_GCS', '1')
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

# XLA compiles of the search step on CPU (tests/e2e/test_xla.py) take
# minutes less with these; XLA reads them once, before its first compile.
from tunas_search.runtime import xla  # pylint: disable=g-import-not-at-top,wrong-import-position
xla.use_cpu_compile_options()
