"""`xla.compiled_spec`: a model_fn's step compiled as one XLA computation.

A toy step with what a search step hands the session (a loss, a train op
that moves a variable, a host_call and a collected tensor): compiled, it
runs as one computation and computes what the step computes uncompiled.
tests/e2e/test_xla.py runs a whole search compiled this way.
"""

import numpy as np
import tensorflow as tf

from tunas_search.runtime import xla

tf1 = tf.compat.v1
KEY = 'tests/compiled/collected'
MODE = tf.estimator.ModeKeys.TRAIN


def _step_fn(features, labels, mode):
  """loss = sum(x * w) - y, logged with w[0]; the train op then adds x to w."""
  w = tf1.get_variable('w', [2], initializer=tf1.constant_initializer(
      [1.0, 2.0]), use_resource=True)
  value = w.read_value()
  loss = tf.reduce_sum(features['x'] * value) - labels['y']
  tf1.add_to_collection(KEY, 10.0 * loss)
  packed = tf.reshape(tf.stack([loss, value[0]]), [1, 2])
  with tf.control_dependencies([value]):  # Every output reads w before.
    train_op = w.assign_add(features['x']).op

  def host_fn(values):
    return [values[0, 0] + 0.0]
  return tf1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op, host_call=(host_fn, [packed]))


def _runs(compile_step: bool, steps: int = 2):
  with tf.Graph().as_default() as graph:
    features = {'x': tf.constant([0.5, -1.0])}
    labels = {'y': tf.constant(3.0)}
    tf1.add_to_collection(KEY, tf.constant(-1.0))  # Not the step's: kept.
    spec = (xla.compiled_spec(_step_fn, features, labels, MODE, (KEY,))
            if compile_step else _step_fn(features, labels, MODE))
    collected = tf1.get_collection(KEY)
    fetches = [spec.loss, spec.host_call[1][0], collected]
    types = {op.type for op in graph.get_operations()}
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      results = [session.run([spec.train_op, fetches])[1]
                 for _ in range(steps)]
  return results, types


def test_the_compiled_step_computes_what_the_step_computes():
  plain, plain_types = _runs(compile_step=False)
  step, types = _runs(compile_step=True)
  assert 'XlaClusterOutput' in types and 'XlaClusterOutput' not in plain_types
  for (loss, packed, collected), (p_loss, p_packed, p_collected) in zip(
      step, plain):
    np.testing.assert_allclose(loss, p_loss, rtol=1e-6)
    np.testing.assert_allclose(packed, p_packed, rtol=1e-6)
    np.testing.assert_allclose(collected, p_collected, rtol=1e-6)
  # w = [1, 2], then [1.5, 1]: loss 0.5 - 2 - 3, then 0.75 - 1 - 3; the
  # collection keeps its earlier entry and holds the step's output.
  np.testing.assert_allclose([s[0] for s in step], [-4.5, -3.25])
  np.testing.assert_allclose(step[1][2], [-1.0, -32.5])
  np.testing.assert_allclose(step[1][1], [[-3.25, 1.5]])
