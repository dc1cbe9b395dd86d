"""The controller's Adam, as TuNAS applies it across replicas.

With several replicas (TPU cores), `CrossShardOptimizer(AdamOptimizer)`
averages the gradients first and builds Adam's second moment from the square
of that average. TuNAS's released search builds the second moment from the
cross-replica mean of each replica's *squared* gradient instead (square, then
average), which keeps steps small when replicas disagree: with 32 replicas
whose REINFORCE gradients point in random directions, the averaged gradient's
square is up to 32x smaller than the mean square, and the steps up to ~5.7x
(sqrt(32)) larger. The first moment uses the averaged gradient either way.
On one replica both are the same as `tf.compat.v1.train.AdamOptimizer`.

A second loss (the entropy bonus) is applied as a separate plain gradient
step with the same learning rate, bypassing the moments, as in the original.
See docs/method.md, "Controller".
"""

import re
from typing import Callable, List, Optional, Sequence, Tuple, Union

import tensorflow as tf

tf1 = tf.compat.v1

# docs/method.md section 5, "Adam across replicas": Adam with beta1 = 0 (no
# first-moment averaging), beta2 = 0.999 and epsilon 1e-8 (Bender et al.
# 2020, appendix; the released search's flags).
BETA1 = 0.0
BETA2 = 0.999
EPSILON = 1e-8

# Every replica assigns the same values (built from cross-replica means);
# under a tf.distribute strategy the first replica's assignment is kept.
_REPLICATED = tf.VariableAggregation.ONLY_FIRST_REPLICA

GradsAndVars = Sequence[Tuple[Optional[tf.Tensor], tf.Variable]]
MeanFn = Callable[[tf.Tensor], tf.Tensor]


def _base_name(var: tf.Variable) -> str:
  """`var`'s name without `:0`, and without the `/replica_<i>` that a
  MirroredStrategy's replica i > 0 sees (its slots are looked up by the
  first replica's names)."""
  return re.sub(r'/replica_\d+$', '', var.name.split(':')[0])


def _slot(var: tf.Variable, suffix: str) -> tf.Variable:
  """A zero-initialised, non-trainable float32 twin of `var`."""
  name = _base_name(var)
  with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE):
    return tf1.get_variable(
        f'{name}/{suffix}', shape=var.shape, dtype=var.dtype.base_dtype,
        initializer=tf1.zeros_initializer(), trainable=False,
        aggregation=_REPLICATED)


def _power(name: str, initial: float) -> tf.Variable:
  with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE):
    return tf1.get_variable(name, shape=[], dtype=tf.float32, trainable=False,
                            initializer=tf1.constant_initializer(initial),
                            aggregation=_REPLICATED)


def apply_adam(grads_and_vars: GradsAndVars,
               learning_rate: Union[float, tf.Tensor],
               cross_replica_mean: MeanFn,
               *,
               extra_grads: Optional[Sequence[Optional[tf.Tensor]]] = None,
               global_step: Optional[tf.Variable] = None,
               beta1: float = BETA1, beta2: float = BETA2,
               epsilon: float = EPSILON,
               scope: str = 'adam') -> tf.Operation:
  """One Adam step with the moments built as TuNAS builds them.

  For each variable, with g this replica's gradient and mean() the
  cross-replica mean:
    m <- beta1 * m + (1 - beta1) * mean(g)
    v <- beta2 * v + (1 - beta2) * mean(g ** 2)
    var <- var - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
    var <- var - lr * mean(e)            (e: `extra_grads`, when given)
  where beta^t are zero-debias accumulators starting at beta (Kingma & Ba
  2015, section 2, epsilon-hat form; the same as tf.compat.v1's Adam).

  Args:
    grads_and_vars: `(gradient, variable)` pairs; a None gradient leaves the
      variable (and its moments) alone.
    learning_rate: float32 scalar.
    cross_replica_mean: maps a per-replica tensor to its mean over replicas
      (the identity on one replica).
    extra_grads: optional gradients of a second loss, one per pair (or None),
      applied as a plain gradient step after the Adam step.
    global_step: incremented by one after every update, when given.
    beta1, beta2, epsilon: Adam's constants.
    scope: name prefix of the two zero-debias accumulators.

  Returns:
    The grouped update op.
  """
  if extra_grads is None:
    extra_grads = [None] * len(grads_and_vars)
  if len(extra_grads) != len(grads_and_vars):
    raise ValueError(f'got {len(extra_grads)} extra gradients for '
                     f'{len(grads_and_vars)} variables')
  with tf1.init_scope():  # Variables are created outside any control flow.
    beta1_power = _power(f'{scope}/beta1_power', beta1)
    beta2_power = _power(f'{scope}/beta2_power', beta2)
    slots = [(_slot(v, 'adam_m'), _slot(v, 'adam_v'))
             for g, v in grads_and_vars if g is not None]
  lr = tf.cast(learning_rate, tf.float32)
  step_size = lr * tf.sqrt(1.0 - beta2_power) / (1.0 - beta1_power)
  updates: List[tf.Operation] = []
  pairs = [(g, e, v) for (g, v), e in zip(grads_and_vars, extra_grads)
           if g is not None]
  for (grad, extra, var), (m, v) in zip(pairs, slots):
    grad = tf.cast(grad, tf.float32)
    new_m = m.assign(beta1 * m + (1.0 - beta1) * cross_replica_mean(grad))
    new_v = v.assign(beta2 * v + (1.0 - beta2) *
                     cross_replica_mean(tf.square(grad)))
    update = var.assign_sub(step_size * new_m / (tf.sqrt(new_v) + epsilon))
    if extra is not None:
      with tf.control_dependencies([update]):
        update = var.assign_sub(lr * cross_replica_mean(
            tf.cast(extra, tf.float32)))
    updates.append(update)
  with tf.control_dependencies(updates):
    finish = [beta1_power.assign(beta1_power * beta1),
              beta2_power.assign(beta2_power * beta2)]
  with tf.control_dependencies(finish):
    if global_step is not None:
      return tf.group(global_step.assign_add(1))
    return tf.no_op()
