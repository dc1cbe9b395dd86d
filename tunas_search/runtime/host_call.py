"""Summaries out of a step: packing scalars for TPUEstimator's host_call."""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import tensorflow as tf


def pack_summaries(scalars: Dict[str, tf.Tensor]
                   ) -> Tuple[List[str], tf.Tensor]:
  """Packs scalar summaries into one rank-1 float32 tensor for host_call.

  Outfeeding one tensor instead of hundreds keeps host_call cheap on TPU.

  Args:
    scalars: name -> a tensor of one element.

  Returns:
    The names in sorted order (the packing order), and a float32 tensor of
    shape [1, n] (host calls concatenate per-replica tensors on their first
    axis).
  """
  names = sorted(scalars)
  packed = tf.stack([tf.cast(tf.reshape(scalars[n], []), tf.float32)
                     for n in names])
  return names, tf.reshape(packed, [1, -1])


def should_record(step: tf.Tensor, every_n_steps: Union[int, Sequence[int]],
                  final_step: Optional[int] = None) -> tf.Tensor:
  """Whether `step` is a multiple of any of `every_n_steps` or `final_step`.

  Args:
    step: int64 scalar.
    every_n_steps: one interval or several (e.g. the host loop and the
      checkpoint interval).
    final_step: a step always recorded (the last of a run), or None.

  Returns:
    A bool scalar.
  """
  if isinstance(every_n_steps, int):
    every_n_steps = [every_n_steps]
  checks = [tf.equal(step % n, 0) for n in every_n_steps]
  if final_step is not None:
    checks.append(tf.equal(step, final_step))
  return tf.reduce_any(tf.stack(checks))


def make_host_call(model_dir: str, names: Sequence[str], packed: tf.Tensor,
                   step: tf.Tensor, every_n_steps: Union[int, Sequence[int]],
                   final_step: Optional[int] = None):
  """Builds the (fn, tensors) pair for TPUEstimatorSpec.host_call.

  The host function writes replica 0's values as TensorBoard scalars named
  `names` under the step number `step`, when `should_record(step,
  every_n_steps, final_step)`, and flushes the events file at each such step,
  so a run killed later loses none of them (docs/method.md section 6). Steps
  that record nothing flush nothing.

  Args:
    model_dir: where the events file goes.
    names: the scalar names, in packing order (`pack_summaries`).
    packed: float32 [1, len(names)] from `pack_summaries`.
    step: integer scalar tensor, the step number the values are logged at.
    every_n_steps: record at multiples of this interval (or of any of these).
    final_step: also record at this step.
  """
  names = list(names)

  def host_call_fn(step, values):
    step = step[0]
    record = should_record(step, every_n_steps, final_step)
    writer = tf.summary.create_file_writer(model_dir, max_queue=1000)

    def write_and_flush():
      # One cond decides for every scalar; `record_if(record)` around the
      # writes would build a cond per scalar, which for a full space's ~500
      # scalars cost seconds of graph building.
      with writer.as_default(), tf.summary.record_if(True):
        written = [tf.summary.scalar(name, value, step=step)
                   for name, value in zip(names, tf.unstack(values[0]))]
      with tf.control_dependencies(written):
        flush = tf.summary.flush(writer)
      with tf.control_dependencies([flush]):
        return tf.constant(True)

    return [tf.cond(record, write_and_flush, lambda: tf.constant(False))]

  step = tf.reshape(tf.cast(step, tf.int64), [1])
  return host_call_fn, [step, packed]
