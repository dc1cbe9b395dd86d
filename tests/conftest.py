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
# Tests check what a compiled step computes, not how fast its machine code
# runs: LLVM's optimisation level 0 skips most of LLVM's time in a compile
# (issue 56). XLA's own passes, which decide what the program computes, run
# at every level.
if '--xla_backend_optimization_level' not in os.environ['XLA_FLAGS']:
  os.environ['XLA_FLAGS'] += ' --xla_backend_optimization_level=0'
