"""The CPU compile options: how they merge into XLA_FLAGS, and what they do.

The effect is checked on XLA's own output: with the options, the branches of
a conditional stay functions of their own in the optimised LLVM module;
without them LLVM inlines them into the step's function.
"""

import glob
import os
import subprocess
import sys
import textwrap

from tunas_search.runtime import xla

_CHILD = textwrap.dedent("""
    import tensorflow as tf

    def chain(x, k):  # Large enough that XLA keeps the conditional.
      for i in range(12):
        x = tf.nn.relu(tf.matmul(x, x) * 0.01 + float(i + k))
      return x

    @tf.function(jit_compile=True)
    def f(x, p):
      return tf.cond(p, lambda: chain(x, 0), lambda: chain(x, 1))

    print(float(tf.reduce_sum(f(tf.eye(8), tf.constant(True)))))
""")


def test_options_are_added_to_empty_and_other_flags():
  assert xla.with_cpu_compile_options('') == (
      '--xla_backend_extra_options=' + xla.CPU_BACKEND_OPTIONS)
  merged = xla.with_cpu_compile_options('--xla_dump_to=/tmp/x')
  assert merged.startswith('--xla_dump_to=/tmp/x ')
  assert merged.endswith(xla.CPU_BACKEND_OPTIONS)


def test_callers_own_backend_options_win():
  own = '--xla_backend_extra_options=-some-option=1'
  assert xla.with_cpu_compile_options(own) == own


def test_use_sets_the_environment_mapping():
  environ = {'XLA_FLAGS': '--xla_dump_to=/tmp/x'}
  xla.use_cpu_compile_options(environ)
  assert environ['XLA_FLAGS'] == xla.with_cpu_compile_options(
      '--xla_dump_to=/tmp/x')
  empty = {}
  xla.use_cpu_compile_options(empty)
  assert xla.CPU_BACKEND_OPTIONS in empty['XLA_FLAGS']


def _compiled_functions(tmp_path, name: str, flags: str):
  """Runs the child under `flags`; its result and optimised function count."""
  dump = tmp_path / name
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
             XLA_FLAGS=f'{flags} --xla_dump_to={dump}'.strip())
  done = subprocess.run([sys.executable, '-c', _CHILD], env=env, check=True,
                        capture_output=True, text=True)
  [module] = glob.glob(str(dump / '*ir-with-opt.ll'))
  with open(module) as f:
    functions = sum(line.startswith('define') for line in f)
  return float(done.stdout.strip().splitlines()[-1]), functions


def test_options_keep_conditional_branches_out_of_line(tmp_path):
  plain_value, plain = _compiled_functions(tmp_path, 'plain', '')
  value, functions = _compiled_functions(
      tmp_path, 'options', xla.with_cpu_compile_options(''))
  assert value == plain_value  # Only where the code lives changes.
  assert plain == 1  # Both branches inlined into the computation.
  assert functions == 3  # The computation and one function per branch.
