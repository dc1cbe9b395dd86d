"""XLA off TPU: a step compiled as one computation, and the CPU compile options.

`compiled_spec` (`step_build=xla` off TPU): on TPU the TPUEstimator compiles
the model_fn's step; on a GPU or a CPU the model_fn does it itself, with the
same wrapping (`tf_internals.xla.compile`: the loss and the host_call tensors
come out, the train op is a control dependency of them; docs/xla.md), so
that a GPU runs the masked-width program a TPU runs instead of the graph op
by op (docs/DESIGN.md, "The step plan"). Everything the step leaves for the
session outside it (the loss, the host_call's tensors, the tensors hooks
read from graph collections) becomes an output of the computation.

`use_cpu_compile_options` makes compiling a search step on the CPU
affordable. CI proves the TPU step by compiling it with XLA's CPU backend
(tests/e2e/test_xla.py, bench/xla_compile.py). That backend gives the whole
step to LLVM as one module, and LLVM's inliner folds every conditional
branch (each op choice of the supernet, forward and gradient) into the one
function of the step: ~300k LLVM instructions for `proxylessnas_search`.
LLVM's loop passes (loop rotation above all) then take time quadratic in
that function's size. Keeping the branches as functions of their own cut
the compile of a 3-block space by about 40% and made the full space compile
at all (docs/xla.md, "Where the time goes"). Only for XLA's CPU backend: the
TPU compiler does not go through LLVM, and on a GPU, XLA relies on inlining
inside its kernels. Set before the first XLA compile of the process (XLA
reads XLA_FLAGS once).
"""

import os
from typing import Callable, Dict, MutableMapping, Sequence

import tensorflow as tf

from tunas_search.tf_internals import xla as tf_xla

tf1 = tf.compat.v1

# LLVM's inliner adds a large bonus for a function's only call site; a
# threshold far below zero outweighs it, so nothing is inlined. Loop
# rotation updates the dominator tree of the whole function for each loop it
# rotates: 61% of LLVM's time for a full space. XLA's loops are rotated
# only when their header is at most this many instructions; none is that
# small, so none is rotated (the compiled step was not slower: docs/xla.md).
CPU_BACKEND_OPTIONS = '-inline-threshold=-1000000,-rotation-max-header-size=0'
_BACKEND_FLAG = '--xla_backend_extra_options'


def _collected(keys: Sequence[str]) -> Dict[str, list]:
  return {k: list(tf1.get_collection(k)) for k in keys}


def compiled_spec(step_fn: Callable, features: Dict[str, tf.Tensor],
                  labels: Dict[str, tf.Tensor], mode: str,
                  collections: Sequence[str] = ()):
  """`step_fn(features, labels, mode)`'s TPUEstimatorSpec, compiled by XLA.

  Args:
    step_fn: builds the step; returns a TPUEstimatorSpec whose host_call, if
      any, is a `(fn, [tensors])` pair.
    features, labels: dicts of tensors (the input pipeline's batch).
    mode: the estimator mode, passed on.
    collections: graph collection keys `step_fn` adds step tensors to; the
      entries it adds are replaced by the computation's outputs, so that a
      hook can still fetch them.

  Returns:
    A TPUEstimatorSpec whose loss, host_call tensors and collected tensors
    are outputs of one XLA computation, and whose train op runs it.
  """
  feature_keys, label_keys = sorted(features), sorted(labels)
  inputs = ([features[k] for k in feature_keys] +
            [labels[k] for k in label_keys])
  before = _collected(collections)
  built = {}

  def computation(*args):
    spec = step_fn(dict(zip(feature_keys, args[:len(feature_keys)])),
                   dict(zip(label_keys, args[len(feature_keys):])), mode)
    host_fn, host_tensors = spec.host_call or (None, [])
    added = {k: v[len(before[k]):] for k, v in _collected(collections).items()}
    built.update(spec=spec, host_fn=host_fn, num_host=len(host_tensors),
                 added=added)
    outputs = [spec.loss, *host_tensors]
    outputs += [t for k in collections for t in added[k]]
    with tf.control_dependencies([spec.train_op]):
      return [tf.identity(t) for t in outputs]

  outputs = tf_xla.compile(computation, inputs)
  spec = built['spec']
  loss, rest = outputs[0], outputs[1:]
  host_tensors, rest = rest[:built['num_host']], rest[built['num_host']:]
  for key in collections:
    entries = tf1.get_collection_ref(key)
    del entries[len(before[key]):]
    count = len(built['added'][key])
    entries.extend(rest[:count])
    rest = rest[count:]
  host_call = ((built['host_fn'], host_tensors) if built['host_fn']
               else None)
  return tf1.estimator.tpu.TPUEstimatorSpec(
      mode=spec.mode, loss=loss, train_op=tf.group(outputs),
      host_call=host_call, scaffold_fn=spec.scaffold_fn,
      training_hooks=spec.training_hooks)


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
