"""Reward functions, the moving-average baseline and the REINFORCE loss.

docs/method.md section 5. A reward function combines the quality of the sampled
architecture (top-1 accuracy on the validation batch) with its estimated cost
relative to a target: cost_ratio = cost / target, beta = exponent
(default -0.10, so a costlier network earns less).
"""

from typing import Callable, NamedTuple, Optional, Union

import tensorflow as tf

from tunas_search.registry import Registry

# Cost exponent beta (docs/method.md section 5; Bender et al. 2020).
DEFAULT_EXPONENT = -0.10
DEFAULT_REWARD = 'abs'
# Momentum of the reward baseline (docs/method.md section 5).
DEFAULT_BASELINE_MOMENTUM = 0.95

FloatLike = Union[float, tf.Tensor]


class RewardTerms(NamedTuple):
  """A reward and how the cost shaped it (float32 scalars).

  Attributes:
    reward: the reward fed to REINFORCE.
    cost_ratio: cost / target (0 when there is no cost model).
    cost_adjustment: for `abs`, the additive term (reward = quality +
      cost_adjustment); for `mnas` and `mnas_hard`, the multiplicative factor
      (reward = quality * cost_adjustment). 0 (additive) without a cost model.
  """
  reward: tf.Tensor
  cost_ratio: tf.Tensor
  cost_adjustment: tf.Tensor


RewardFn = Callable[[FloatLike, FloatLike, FloatLike, FloatLike], RewardTerms]

REGISTRY: Registry[RewardFn] = Registry('reward function')


def _ratio(cost: FloatLike, target: FloatLike) -> tf.Tensor:
  return tf.cast(cost, tf.float32) / tf.cast(target, tf.float32)


@REGISTRY.register('abs')
def abs_reward(quality: FloatLike, cost: FloatLike, target: FloatLike,
               exponent: FloatLike = DEFAULT_EXPONENT) -> RewardTerms:
  """TuNAS's absolute-value reward: quality + beta * |cost/target - 1|.

  Penalises both missing and overshooting the target, which keeps searches
  close to it (Bender et al. 2020). The TuNAS default.
  """
  ratio = _ratio(cost, target)
  adjustment = tf.cast(exponent, tf.float32) * tf.abs(ratio - 1.0)
  return RewardTerms(tf.cast(quality, tf.float32) + adjustment, ratio,
                     adjustment)


@REGISTRY.register('mnas')
def mnas_reward(quality: FloatLike, cost: FloatLike, target: FloatLike,
                exponent: FloatLike = DEFAULT_EXPONENT) -> RewardTerms:
  """MnasNet's soft reward: quality * (cost/target)^beta (Tan et al. 2019).

  `cost_adjustment` is the factor (cost/target)^beta. Cost and target must
  be positive.
  """
  ratio = _ratio(cost, target)
  factor = tf.pow(ratio, tf.cast(exponent, tf.float32))
  return RewardTerms(tf.cast(quality, tf.float32) * factor, ratio, factor)


@REGISTRY.register('mnas_hard')
def mnas_hard_reward(quality: FloatLike, cost: FloatLike, target: FloatLike,
                     exponent: FloatLike = DEFAULT_EXPONENT) -> RewardTerms:
  """MnasNet's hard-constraint reward: quality * min((cost/target)^beta, 1).

  Networks under the target are not rewarded for being cheaper (Tan et al.
  2019, section 3). `cost_adjustment` is the clipped factor. Cost and target
  must be positive.
  """
  ratio = _ratio(cost, target)
  factor = tf.minimum(tf.pow(ratio, tf.cast(exponent, tf.float32)), 1.0)
  return RewardTerms(tf.cast(quality, tf.float32) * factor, ratio, factor)


def quality_only(quality: FloatLike) -> RewardTerms:
  """The reward without a cost model: reward = quality."""
  quality = tf.cast(quality, tf.float32)
  zero = tf.zeros_like(quality)
  return RewardTerms(quality, zero, zero)


def compute_reward(name: str, quality: FloatLike, cost: Optional[FloatLike],
                   target: Optional[FloatLike],
                   exponent: FloatLike = DEFAULT_EXPONENT) -> RewardTerms:
  """Looks up reward function `name`; `quality_only` when cost is None.

  Raises:
    UnknownNameError: for an unregistered `name` (lists the valid ones).
    ValueError: if `cost` is given without `target`.
  """
  fn = REGISTRY.get(name)
  if cost is None:
    return quality_only(quality)
  if target is None:
    raise ValueError('a cost target is needed when a cost is given')
  return fn(quality, cost, target, exponent)


def ema_baseline(value: FloatLike,
                 momentum: float = DEFAULT_BASELINE_MOMENTUM,
                 scope: str = 'baseline') -> tf.Tensor:
  """Feeds `value` into a zero-debiased exponential moving average.

  ema_t = m * ema_{t-1} + (1 - m) * value, ema_0 = 0, and the estimate is
  ema_t / (1 - m^t) (the bias correction of Adam, Kingma & Ba 2015, section
  3), so the first estimate equals the first value. The average and t live in
  non-trainable float32 variables `<scope>/ema` and `<scope>/count`, so a
  checkpoint keeps them and a resumed run continues the average.

  Graph mode only (variables come from `tf.compat.v1.get_variable`). Every
  replica of a tf.distribute strategy must feed the same (cross-replica)
  value: the first replica's update is the one kept.

  Args:
    value: float32 scalar, e.g. the cross-replica mean reward.
    momentum: m in [0, 1).
    scope: variable scope of the two variables.

  Returns:
    float32 scalar, the debiased estimate including `value`. It depends on the
    update, so each evaluation updates the average exactly once.

  Raises:
    ValueError: if momentum is outside [0, 1).
  """
  if not 0.0 <= momentum < 1.0:
    raise ValueError(f'momentum must be in [0, 1), got {momentum}')
  with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
    ema = tf.compat.v1.get_variable(
        'ema', shape=[], dtype=tf.float32, trainable=False,
        initializer=tf.compat.v1.zeros_initializer(),
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    count = tf.compat.v1.get_variable(
        'count', shape=[], dtype=tf.float32, trainable=False,
        initializer=tf.compat.v1.zeros_initializer(),
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  value = tf.cast(value, tf.float32)
  update_ema = ema.assign_sub((1.0 - momentum) * (ema - value))
  update_count = count.assign_add(1.0)
  with tf.control_dependencies([update_ema, update_count]):
    new_ema = tf.identity(ema.read_value())
    new_count = tf.identity(count.read_value())
  return new_ema / (1.0 - tf.pow(tf.constant(momentum, tf.float32),
                                 new_count))


def reinforce_loss(log_prob: tf.Tensor, advantage: tf.Tensor,
                   entropy: tf.Tensor,
                   entropy_weight: FloatLike = 0.0) -> tf.Tensor:
  """REINFORCE loss with an entropy bonus (Williams 1992; docs/method.md section 5).

  loss = -stop_gradient(advantage) * log_prob - entropy_weight * entropy.

  Args:
    log_prob: float32 scalar, log-probability of the sampled architecture.
    advantage: float32 scalar, reward - baseline (no gradient flows into it).
    entropy: float32 scalar, entropy of the controller's distribution.
    entropy_weight: float32 scalar (TuNAS default 0).

  Returns:
    float32 scalar loss to minimise.
  """
  return (-tf.stop_gradient(tf.cast(advantage, tf.float32)) * log_prob -
          tf.cast(entropy_weight, tf.float32) * entropy)
