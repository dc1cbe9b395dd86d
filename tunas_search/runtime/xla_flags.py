"""XLA settings that make compiling a search step on the CPU affordable.

CI proves the TPU step by compiling it with XLA's CPU backend
(tests/e2e/test_xla.py, bench/xla_compile.py). That backend gives the whole
step to LLVM as one module, and LLVM's inliner folds every conditional
branch (each op choice of the supernet, forward and gradient) into the one
function of the step: ~300k LLVM instructions for `proxylessnas_search`.
LLVM's loop passes (loop rotation above all) then take time quadratic in
that function's size. Keeping the branches as functions of their own cut
the compile of a 3-block space by about 40% and made the full space compile
at all (docs/xla.md, "Where the time goes").

Only for XLA's CPU backend: the TPU compiler does not go through LLVM, and
on a GPU, XLA relies on inlining inside its kernels. Set before the first
XLA compile of the process (XLA reads XLA_FLAGS once).
"""

import os
from typing import MutableMapping

# LLVM's inliner adds a large bonus for a function's only call site; a
# threshold far below zero outweighs it, so nothing is inlined. Loop
# rotation updates the dominator tree of the whole function for each loop it
# rotates: 61% of LLVM's time for a full space. XLA's loops are rotated
# only when their header is at most this many instructions; none is that
# small, so none is rotated (the compiled step was not slower: docs/xla.md).
CPU_BACKEND_OPTIONS = '-inline-threshold=-1000000,-rotation-max-header-size=0'
_BACKEND_FLAG = '--xla_backend_extra_options'


def with_cpu_compile_options(xla_flags: str) -> str:
  """An XLA_FLAGS value with `CPU_BACKEND_OPTIONS` added.

  A value that already sets backend options is returned unchanged: XLA keeps
  only one setting of a flag, and the caller's wins.
  """
  if _BACKEND_FLAG in xla_flags:
    return xla_flags
  return f'{xla_flags} {_BACKEND_FLAG}={CPU_BACKEND_OPTIONS}'.strip()


def use_cpu_compile_options(
    environ: MutableMapping[str, str] = os.environ) -> None:
  """Adds the options to `environ['XLA_FLAGS']` (see the module docstring)."""
  environ['XLA_FLAGS'] = with_cpu_compile_options(environ.get('XLA_FLAGS', ''))
