"""A step whose loss or gradients are not finite: the check, zeroed
gradients and the NaN loss that stops the run (docs/method.md section 6)."""

from typing import Sequence

import tensorflow as tf


def all_finite(loss: tf.Tensor, grads_and_vars=(),
               half_squared_norms: Sequence[tf.Tensor] = ()) -> tf.Tensor:
  """Whether the loss and every gradient are free of NaN and +-inf.

  The gradients are checked too: with oneDNN, a NaN input can come out of a
  convolution as zeros, giving a finite loss but NaN gradients. One scalar
  is checked, the global norm of the gradients (NaN or inf if any entry
  is): one reduction per gradient instead of an elementwise test and a
  reduction (docs/xla.md). A gradient norm beyond float32's range (~1.8e19)
  counts as non-finite too; such a step has diverged anyway. The deferred
  update passes `half_squared_norms` instead of gradients
  (`DeferredRMSProp.gradient_norms`), the same norm's parts.
  """
  grads = [g.values if isinstance(g, tf.IndexedSlices) else g
           for g, _ in grads_and_vars if g is not None]
  finite = tf.math.is_finite(loss)
  if grads:
    finite = tf.logical_and(
        finite, tf.math.is_finite(tf.linalg.global_norm(grads)))
  if half_squared_norms:
    # global_norm's formula: sqrt(2 * sum of the halves).
    norm = tf.sqrt(2.0 * tf.add_n(list(half_squared_norms)))
    finite = tf.logical_and(finite, tf.math.is_finite(norm))
  return finite


def finite_or_zero(grads_and_vars, finite: tf.Tensor):
  """Zeroes all gradients of a step whose loss or gradients are not finite.

  The step then leaves the weights finite, so a checkpoint written at the
  step where the run stops on a NaN loss is still a good one. One
  elementwise op per gradient (`multiply_no_nan`: x * 0 is 0 even for NaN
  and inf), where a select needed a tensor of zeros as well.
  """
  scale32 = tf.cast(finite, tf.float32)

  def zeroed(g):
    if g is None:
      return None
    scale = tf.cast(scale32, g.dtype)
    if isinstance(g, tf.IndexedSlices):
      return tf.IndexedSlices(tf.math.multiply_no_nan(g.values, scale),
                              g.indices, g.dense_shape)
    return tf.math.multiply_no_nan(g, scale)
  return [(zeroed(g), v) for g, v in grads_and_vars]


def nan_unless_finite(loss: tf.Tensor, *others: tf.Tensor) -> tf.Tensor:
  """`loss`, or NaN when it or any of `others` is NaN or +-inf.

  TPUEstimator stops a run whose reported loss is NaN (NanTensorHook, on CPU
  and on TPU) but lets +-inf through, and the controller's loss is not
  reported at all; mapping every non-finite case to NaN makes one check cover
  both losses, whatever a CPU's overflow produces.
  """
  finite = tf.reduce_all([tf.math.is_finite(x) for x in (loss,) + others])
  return tf.where(finite, loss, tf.constant(float('nan'), loss.dtype))
