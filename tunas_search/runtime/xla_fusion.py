"""What XLA needs to compile a step well."""

import tensorflow as tf


def computed_once(x: tf.Tensor) -> tf.Tensor:
  """The float32 tensor `x`, as XLA computes it once per step.

  XLA's fusion copies a chain of cheap ops into every consumer but never a
  reduction's input. Without this, the learning-rate schedules (~17 ops) and
  the finite check's 0/1 scale were copied into each variable's update
  fusion (~660 for a full space), and the controller's masks (with the
  warm-up schedule) into each of their scalar uses (docs/xla.md, "Where the
  time goes"). `x / 2 + x / 2` is exactly `x` for 0 and every
  `|x| >= 2^-125` (a cosine schedule's smallest positive rate is ~1e-8 of
  its base; masks are 0, 1 or 1/n), and XLA does not simplify a 2 x 2
  reduction away.
  """
  half = x * 0.5
  zeros = tf.zeros_like(half)
  pairs = tf.stack([tf.stack([half, half]), tf.stack([zeros, zeros])])
  return tf.reduce_sum(pairs, axis=1)[0]
