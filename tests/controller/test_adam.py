"""Tests of the controller's cross-replica Adam against a numpy reference."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.controller import adam as controller_adam

tf1 = tf.compat.v1
LEARNING_RATE = 0.1
# Two replicas' gradients for a 3-logit decision over three steps; they
# disagree in sign, which is where square-then-average and
# average-then-square differ most.
GRADS = np.array([[[1.0, -2.0, 0.5], [-1.0, 1.0, 0.5]],
                  [[0.3, 0.0, -4.0], [0.1, -0.2, 2.0]],
                  [[-2.0, 1.0, 1.0], [2.0, 1.0, -3.0]]], np.float32)
ENTROPY_GRADS = np.array([[0.2, -0.1, 0.0], [0.4, 0.1, -0.2]], np.float32)


def _numpy_adam(grads, beta1, beta2, epsilon, entropy_grads=None):
  """The update of the released TuNAS controller, in float64."""
  var = np.zeros(grads.shape[-1])
  m, v = np.zeros_like(var), np.zeros_like(var)
  b1_power, b2_power = beta1, beta2
  for step_grads in grads.astype(np.float64):
    m = beta1 * m + (1 - beta1) * step_grads.mean(axis=0)
    v = beta2 * v + (1 - beta2) * (step_grads ** 2).mean(axis=0)
    var -= (LEARNING_RATE * np.sqrt(1 - b2_power) / (1 - b1_power) * m /
            (np.sqrt(v) + epsilon))
    if entropy_grads is not None:
      var -= LEARNING_RATE * entropy_grads.mean(axis=0)
    b1_power *= beta1
    b2_power *= beta2
  return var


def _replicated_run(grads, beta1=controller_adam.BETA1,
                    beta2=controller_adam.BETA2, entropy_grads=None):
  """Runs apply_adam with the replica axis simulated as a leading axis.

  Every tensor is [replicas, n]; the cross-replica mean averages over the
  first axis and broadcasts back, exactly what cross_replica_sum / replicas
  gives each replica. Both rows of the variable must stay equal.
  """
  replicas, n = grads.shape[1:]
  with tf.Graph().as_default():
    var = tf1.get_variable('logits', shape=[replicas, n],
                           initializer=tf1.zeros_initializer())
    grad = tf1.placeholder(tf.float32, [replicas, n])
    step = tf1.train.get_or_create_global_step()

    def mean(x):
      return tf.broadcast_to(tf.reduce_mean(x, axis=0, keepdims=True),
                             tf.shape(x))

    extra = None if entropy_grads is None else [tf.constant(entropy_grads)]
    update = controller_adam.apply_adam(
        [(grad, var)], LEARNING_RATE, mean, extra_grads=extra,
        global_step=step, beta1=beta1, beta2=beta2)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for step_grads in grads:
        sess.run(update, {grad: step_grads})
      return sess.run(var), sess.run(step)


@pytest.mark.parametrize('beta1', [0.0, 0.9])
def test_two_replicas_square_then_average(beta1):
  value, step = _replicated_run(GRADS, beta1=beta1)
  expected = _numpy_adam(GRADS, beta1, 0.999, 1e-8)
  # Each step moves a logit by about the learning rate (0.1); float32
  # rounding (~1e-7 of that per operation) leaves ~1e-6 absolute after three
  # steps, where the results themselves may be near 0.
  np.testing.assert_allclose(value[0], expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(value[0], value[1])
  assert step == len(GRADS)
  # CrossShardOptimizer(Adam) would square the averaged gradient; here that
  # gives a visibly different (larger) step.
  squared_mean = _numpy_adam(GRADS.mean(axis=1, keepdims=True), beta1, 0.999,
                             1e-8)
  assert np.max(np.abs(squared_mean - expected)) > 0.05


def test_entropy_bonus_is_a_separate_plain_gradient_step():
  value, _ = _replicated_run(GRADS, entropy_grads=ENTROPY_GRADS)
  expected = _numpy_adam(GRADS, 0.0, 0.999, 1e-8, ENTROPY_GRADS)
  np.testing.assert_allclose(value[0], expected, rtol=1e-5, atol=1e-5)


def test_one_replica_matches_tensorflow_adam():
  grads = GRADS[:, :1]  # [steps, 1 replica, n]
  ours, _ = _replicated_run(grads)
  with tf.Graph().as_default():
    var = tf1.get_variable('v', shape=[1, 3],
                           initializer=tf1.zeros_initializer())
    grad = tf1.placeholder(tf.float32, [1, 3])
    update = tf1.train.AdamOptimizer(
        LEARNING_RATE, beta1=0.0, beta2=0.999, epsilon=1e-8).apply_gradients(
            [(grad, var)])
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for step_grads in grads:
        sess.run(update, {grad: step_grads})
      theirs = sess.run(var)
  # The same float32 formula, evaluated in another order by TF's fused
  # kernel: a few float32 ulps of the ~0.1 steps.
  np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_none_gradient_leaves_variable_alone_and_mismatch_is_refused():
  with tf.Graph().as_default():
    a = tf1.get_variable('a', initializer=tf.constant([1.0, 2.0]))
    b = tf1.get_variable('b', initializer=tf.constant([3.0]))
    update = controller_adam.apply_adam(
        [(None, a), (tf.constant([1.0]), b)], 0.5, tf.identity)
    names = sorted(v.name for v in tf1.global_variables())
    assert 'a/adam_m:0' not in names and 'b/adam_m:0' in names
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      sess.run(update)
      np.testing.assert_array_equal(sess.run(a), [1.0, 2.0])
      # First Adam step: lr * g / (|g| + eps) = 0.5.
      # float32 sqrt(1 - 0.999) is off by ~1e-6 relative.
      np.testing.assert_allclose(sess.run(b), [2.5], rtol=1e-5)
    with pytest.raises(ValueError, match='got 1 extra gradients for 2'):
      controller_adam.apply_adam([(None, a), (None, b)], 0.5, tf.identity,
                                 extra_grads=[None])


def test_several_variables_each_get_their_own_update():
  """Variables of one shape or several, with and without extra gradients
  (the controller's logits groups), each follow their own gradients."""
  rng = np.random.default_rng(3)
  shapes = [[3], [3], [2], [3], [2]]
  has_extra = [True, True, False, False, True]
  grads = [rng.normal(size=[2] + s).astype(np.float32) for s in shapes]
  extras = [rng.normal(size=s).astype(np.float32) if e else None
            for s, e in zip(shapes, has_extra)]
  with tf.Graph().as_default():
    variables = [tf1.get_variable(f'v{i}', shape=s,
                                  initializer=tf1.zeros_initializer())
                 for i, s in enumerate(shapes)]
    feeds = [tf1.placeholder(tf.float32, s) for s in shapes]
    update = controller_adam.apply_adam(
        list(zip(feeds, variables)), LEARNING_RATE, tf.identity,
        extra_grads=[None if e is None else tf.constant(e) for e in extras])
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for step in range(2):
        sess.run(update, {f: g[step] for f, g in zip(feeds, grads)})
      values = sess.run(variables)
  for value, grad, extra in zip(values, grads, extras):
    expected = _numpy_adam(grad[:, None], 0.0, 0.999, 1e-8,
                           None if extra is None else extra[None])
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
