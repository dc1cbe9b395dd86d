"""A step compiled as one XLA computation off TPU (`step_build=xla`).

On TPU the TPUEstimator compiles the model_fn's step; on a GPU or a CPU the
model_fn does it itself, with the same wrapping (`tf_internals.xla.compile`:
the loss and the host_call tensors come out, the train op is a control
dependency of them; docs/xla.md), so that a GPU runs the masked-width
program a TPU runs instead of the graph op by op (docs/DESIGN.md, "The step
plan"). Everything the step leaves for the session outside it (the loss,
the host_call's tensors, the tensors hooks read from graph collections)
becomes an output of the computation.
"""

from typing import Callable, Dict, Sequence

import tensorflow as tf

from tunas_search.tf_internals import xla

tf1 = tf.compat.v1


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

  outputs = xla.compile(computation, inputs)
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
