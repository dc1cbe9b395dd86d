"""Tests for reward functions, the debiased EMA baseline and the loss."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.search import rewards
from tunas_search.registry import UnknownNameError


def _eval(terms):
  return [float(t) for t in terms]

# The rewards are float32 tensors (relative rounding 6e-8 per op); a bare
# pytest.approx (rel=1e-6) allows a few such roundings against the float64
# hand computations throughout this file.


def test_registry_names_and_unknown_name():
  assert rewards.REGISTRY.names() == ['abs', 'mnas', 'mnas_hard']
  with pytest.raises(UnknownNameError, match='abs, mnas, mnas_hard'):
    rewards.REGISTRY.get('linear')


def test_abs_reward_hand_computed():
  # cost 105 vs target 84: ratio 1.25, adjustment -0.1 * 0.25 = -0.025.
  reward, ratio, adj = _eval(rewards.REGISTRY.get('abs')(0.7, 105.0, 84.0,
                                                         -0.1))
  assert ratio == pytest.approx(1.25)
  assert adj == pytest.approx(-0.025)
  assert reward == pytest.approx(0.675)
  # Undershooting is penalised the same way: ratio 0.75.
  reward, _, _ = _eval(rewards.abs_reward(0.7, 63.0, 84.0))
  assert reward == pytest.approx(0.675)


def test_mnas_reward_hand_computed():
  reward, ratio, factor = _eval(rewards.mnas_reward(0.7, 168.0, 84.0, -0.1))
  assert ratio == pytest.approx(2.0)
  assert factor == pytest.approx(2.0 ** -0.1)  # 0.933033
  assert reward == pytest.approx(0.7 * 0.9330329915)
  # Cheaper than the target earns a bonus: 0.5^-0.1 = 1.071773.
  reward, _, factor = _eval(rewards.mnas_reward(0.7, 42.0, 84.0, -0.1))
  assert factor == pytest.approx(1.0717734625)
  assert reward == pytest.approx(0.7 * 1.0717734625)


def test_mnas_hard_reward_clips_bonus():
  reward, _, factor = _eval(rewards.mnas_hard_reward(0.7, 42.0, 84.0, -0.1))
  assert (reward, factor) == (pytest.approx(0.7), pytest.approx(1.0))
  reward, _, factor = _eval(rewards.mnas_hard_reward(0.7, 168.0, 84.0, -0.1))
  assert factor == pytest.approx(0.9330329915)
  assert reward == pytest.approx(0.7 * 0.9330329915)


def test_quality_only_and_compute_reward():
  reward, ratio, adj = _eval(rewards.quality_only(0.6))
  assert (reward, ratio, adj) == (pytest.approx(0.6), 0.0, 0.0)
  assert float(rewards.compute_reward('mnas', 0.6, None, None).reward) == (
      pytest.approx(0.6))
  assert float(rewards.compute_reward('abs', 0.6, 42.0, 84.0).reward) == (
      pytest.approx(0.55))
  with pytest.raises(ValueError, match='target'):
    rewards.compute_reward('abs', 0.6, 42.0, None)


def test_ema_baseline_debiased_after_three_updates():
  with tf.Graph().as_default():
    value = tf.compat.v1.placeholder(tf.float32, [])
    estimate = rewards.ema_baseline(value, momentum=0.95)
    names = sorted(v.op.name for v in tf.compat.v1.global_variables())
    assert names == ['baseline/count', 'baseline/ema']  # The default scope.
    assert not tf.compat.v1.trainable_variables()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got = [float(sess.run(estimate, {value: v})) for v in (1.0, 2.0, 3.0)]
  # By hand: ema = 0.05, 0.1475, 0.290125; 1 - m^t = 0.05, 0.0975, 0.142625.
  # float32 in graph: float32(0.95) is off by 1.2e-8, which 1 - 0.95^t turns
  # into 2.4e-7 relative at t = 1 (and the ratios compound): rtol=1e-5.
  np.testing.assert_allclose(
      got, [1.0, 0.1475 / 0.0975, 0.290125 / 0.142625], rtol=1e-5)


def test_ema_baseline_resumes_from_variables():
  with tf.Graph().as_default():
    value = tf.compat.v1.placeholder(tf.float32, [])
    estimate = rewards.ema_baseline(value, momentum=0.5, scope='b')
    with tf.compat.v1.variable_scope('b', reuse=True):
      ema = tf.compat.v1.get_variable('ema')
      count = tf.compat.v1.get_variable('count')
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      # As if restored after two updates with values 4 then 4: ema 3, t = 2.
      sess.run([ema.assign(3.0), count.assign(2.0)])
      got = float(sess.run(estimate, {value: 8.0}))
      assert sess.run(count) == 3.0
  # ema_3 = 0.5 * 3 + 0.5 * 8 = 5.5; debiased by 1 - 0.125.
  assert got == pytest.approx(5.5 / 0.875)


def test_ema_baseline_rejects_bad_momentum():
  with tf.Graph().as_default(), pytest.raises(ValueError, match='momentum'):
    rewards.ema_baseline(1.0, momentum=1.0)


def test_reinforce_loss_value_and_gradient():
  with tf.Graph().as_default():
    x = tf.Variable(2.0)
    log_prob = -x * x   # d/dx = -2x = -4
    advantage = 0.5 * x  # must not receive gradient
    entropy = 3.0 * x   # d/dx = 3
    loss = rewards.reinforce_loss(log_prob, advantage, entropy, 0.1)
    (grad,) = tf.gradients(loss, [x])
    with tf.compat.v1.Session() as sess:
      sess.run(x.initializer)
      loss_v, grad_v = sess.run([loss, grad])
  # loss = -1 * (-4) - 0.1 * 6 = 3.4; grad = -1 * (-4) - 0.1 * 3 = 3.7.
  assert loss_v == pytest.approx(3.4)
  assert grad_v == pytest.approx(3.7)
