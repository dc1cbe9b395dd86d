"""In-graph learning-rate and warm-up schedules driven by the global step.

Every schedule takes the int64 global step (a tensor or a Python int) plus
Python numbers and returns a float32 scalar tensor, so it runs inside a
TPUEstimator model_fn (float32 only: TPUs have no float64). Steps are exact
in float32 up to 2^24 (16.7M), far beyond a 90-epoch search.
"""

import math
from typing import Union

import tensorflow as tf

StepLike = Union[int, tf.Tensor]



def _float_step(step: StepLike) -> tf.Tensor:
  return tf.cast(step, tf.float32)


def _progress(step: StepLike, start: int, end: int) -> tf.Tensor:
  """(step - start) / (end - start), clipped to [0, 1]; 1 when end <= start."""
  if end <= start:
    return tf.cast(_float_step(step) >= start, tf.float32)
  fraction = (_float_step(step) - float(start)) / float(end - start)
  return tf.clip_by_value(fraction, 0.0, 1.0)


def cosine_with_warmup(step: StepLike, base_lr: float, total_steps: int,
                       warmup_steps: int) -> tf.Tensor:
  """Linear warm-up from 0 to `base_lr`, then cosine decay to 0.

  docs/method.md section 6 (warm-up over the first 2.5% of steps): lr = base_lr *
  step / warmup_steps before `warmup_steps`, then base_lr * (1 + cos(pi * p))
  / 2 with p going 0 -> 1 from `warmup_steps` to `total_steps` (cosine decay:
  Loshchilov & Hutter 2017, eq. 5, without restarts). 0 from `total_steps`.

  Args:
    step: int64 global step.
    base_lr: peak learning rate.
    total_steps: last step of training.
    warmup_steps: length of the linear warm-up (0 for none).

  Returns:
    float32 scalar learning rate.

  Raises:
    ValueError: if warmup_steps is negative or exceeds total_steps.
  """
  if not 0 <= warmup_steps <= total_steps:
    raise ValueError(f'need 0 <= warmup_steps ({warmup_steps}) <= '
                     f'total_steps ({total_steps})')
  decay = 0.5 * (1.0 + tf.cos(
      math.pi * _progress(step, warmup_steps, total_steps)))
  if warmup_steps == 0:
    return base_lr * decay
  warmup = _float_step(step) / float(warmup_steps)
  return base_lr * tf.where(_float_step(step) < warmup_steps, warmup, decay)


def rl_learning_rate(step: StepLike, base_lr: float, total_steps: int,
                     delay_steps: int, use_exponential: bool) -> tf.Tensor:
  """The controller's learning rate (docs/method.md section 5).

  0 before `delay_steps` (the shared weights train alone first); from then on
  `base_lr`, multiplied by 10^p when `use_exponential`, with p going 0 -> 1
  from `delay_steps` to `total_steps` (so the rate ends 10x higher).

  Args:
    step: int64 global step.
    base_lr: learning rate at the end of the delay.
    total_steps: last step of the search.
    delay_steps: steps with a zero learning rate.
    use_exponential: whether to grow the rate 10x over the search.

  Returns:
    float32 scalar learning rate.
  """
  lr = tf.constant(base_lr, tf.float32)
  if use_exponential:
    lr *= tf.pow(10.0, _progress(step, delay_steps, total_steps))
  active = _float_step(step) >= float(delay_steps)
  return tf.where(active, lr, tf.zeros_like(lr))


def linear_decay_prob(step: StepLike, warmup_steps: int) -> tf.Tensor:
  """Warm-up probability: 1 at step 0, linearly to 0 at `warmup_steps`.

  Used for p_ops and p_filters (docs/method.md section 5). 0 from `warmup_steps`
  on, and always 0 when `warmup_steps` is 0 (no warm-up).

  Args:
    step: int64 global step.
    warmup_steps: length of the warm-up.

  Returns:
    float32 scalar in [0, 1].
  """
  if warmup_steps <= 0:
    return tf.zeros_like(_float_step(step))
  return 1.0 - _progress(step, 0, warmup_steps)
