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


# Under `make test` (xdist, --dist=loadfile --no-loadscope-reorder) files are
# handed to the two workers in collection order, each worker taking the next
# file as it finishes one. The rooms whose files run whole searches and
# tools go first, so the last files handed out are short unit files and both
# workers finish together; xdist's own order (most tests first) left a long
# e2e file for last and one worker idle (docs/testing.md, "Order").
_HEAVY_FIRST = ('e2e', 'bin', 'evaluation', 'search', 'standalone',
                'supernet', 'bench')


def _room_rank(item) -> int:
  parts = item.nodeid.split('/')
  room = parts[1] if len(parts) > 2 and parts[0] == 'tests' else ''
  return (_HEAVY_FIRST.index(room) if room in _HEAVY_FIRST
          else len(_HEAVY_FIRST))


def pytest_collection_modifyitems(items):
  """Heavy rooms first; files within a room by test count, most first."""
  per_file = {}
  for item in items:
    name = item.nodeid.split('::')[0]
    per_file[name] = per_file.get(name, 0) + 1
  # A stable sort: a file's tests keep their order.
  items.sort(key=lambda item: (_room_rank(item),
                               -per_file[item.nodeid.split('::')[0]],
                               item.nodeid.split('::')[0]))
