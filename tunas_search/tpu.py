"""Everything TPU-specific, with the CPU path beside it.

On one replica (CPU, GPU, or `use_tpu=False`) the cross-replica operations are
identities and no TPU op is created, so the same model_fn runs everywhere.
"""

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

tf1 = tf.compat.v1


def cross_replica_mean(value: tf.Tensor, num_replicas: int,
                       use_tpu: bool) -> tf.Tensor:
  """Mean of `value` over replicas; the identity on one replica."""
  if not use_tpu or num_replicas == 1:
    return tf.identity(value)
  return tf1.tpu.cross_replica_sum(value) / float(num_replicas)


def maybe_cross_shard(optimizer: tf1.train.Optimizer,
                      use_tpu: bool) -> tf1.train.Optimizer:
  """Wraps `optimizer` so gradients are averaged across TPU cores (TPU only)."""
  if use_tpu:
    return tf1.tpu.CrossShardOptimizer(optimizer)
  return optimizer


def pack_summaries(scalars: Dict[str, tf.Tensor]) -> Tuple[List[str], tf.Tensor]:
  """Stacks scalar summaries into one rank-1 float32 tensor for host_call.

  Outfeeding one tensor instead of hundreds keeps host_call cheap on TPU.

  Returns:
    The names in packing order, and a float32 tensor of shape [1, n] (host
    calls concatenate per-replica tensors on their first axis).
  """
  names = sorted(scalars)
  packed = tf.stack([tf.cast(tf.reshape(scalars[n], []), tf.float32)
                     for n in names])
  return names, tf.reshape(packed, [1, -1])


def make_host_call(model_dir: str, names: Sequence[str], packed: tf.Tensor,
                   global_step: tf.Tensor, every_n_steps: int):
  """Builds the (fn, tensors) pair for TPUEstimatorSpec.host_call.

  The host function writes replica 0's values as TensorBoard scalars named
  `names`, every `every_n_steps` steps (SPEC.md section 6).
  """
  names = list(names)

  def host_call_fn(step, values):
    step = step[0]
    writer = tf.summary.create_file_writer(model_dir, max_queue=1000)
    with writer.as_default(), tf.summary.record_if(
        tf.equal(step % every_n_steps, 0)):
      for i, name in enumerate(names):
        tf.summary.scalar(name, values[0, i], step=step)
      return tf1.summary.all_v2_summary_ops()

  step = tf.reshape(tf.cast(global_step, tf.int64), [1])
  return host_call_fn, [step, packed]


def make_run_config(model_dir: str, use_tpu: bool, iterations_per_loop: int,
                    num_shards: int, save_checkpoints_steps: int,
                    keep_checkpoint_max: int, tpu: Optional[str] = None,
                    tpu_zone: Optional[str] = None,
                    gcp_project: Optional[str] = None,
                    seed: Optional[int] = None) -> tf1.estimator.tpu.RunConfig:
  """A TPU RunConfig; resolves the Cloud TPU by name only when `use_tpu`."""
  cluster = None
  if use_tpu:
    cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu, zone=tpu_zone, project=gcp_project)
  return tf1.estimator.tpu.RunConfig(
      cluster=cluster,
      model_dir=model_dir,
      tf_random_seed=seed,
      save_checkpoints_steps=save_checkpoints_steps,
      keep_checkpoint_max=keep_checkpoint_max,
      log_step_count_steps=None,  # ProgressHook logs instead.
      save_summary_steps=None,  # Summaries go through host_call.
      tpu_config=tf1.estimator.tpu.TPUConfig(
          iterations_per_loop=iterations_per_loop,
          num_shards=num_shards if use_tpu else None,
          per_host_input_for_training=(
              tf1.estimator.tpu.InputPipelineConfig.PER_HOST_V2)))


def make_estimator(model_fn: Callable, run_config, use_tpu: bool,
                   train_batch_size: int,
                   eval_batch_size: Optional[int] = None,
                   predict_batch_size: Optional[int] = None,
                   params: Optional[dict] = None):
  """A TPUEstimator that runs on TPU, or on CPU/GPU with `use_tpu=False`."""
  return tf1.estimator.tpu.TPUEstimator(
      model_fn=model_fn, config=run_config, use_tpu=use_tpu,
      train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
      predict_batch_size=predict_batch_size, params=params or {})


class ProgressHook(tf1.train.SessionRunHook):
  """Logs step, steps/s, images/s and ETA every `every_n_steps` steps.

  On TPU the hook sees one run per host loop, so it logs once per loop.
  """

  def __init__(self, total_steps: int, batch_size: int, every_n_steps: int,
               label: str = 'search'):
    self._total = total_steps
    self._batch = batch_size
    self._every = max(1, every_n_steps)
    self._label = label
    self._last: Optional[Tuple[float, int]] = None
    self._last_logged = -1

  def begin(self):
    self._step = tf1.train.get_global_step()

  def before_run(self, run_context):
    return tf1.train.SessionRunArgs(self._step)

  def after_run(self, run_context, run_values):
    step = int(run_values.results) + 1  # The value read before the update.
    now = time.time()
    if self._last is None:
      self._last = (now, step)
      return
    if step - self._last_logged < self._every and step < self._total:
      return
    t0, s0 = self._last
    if step <= s0 or now <= t0:
      return
    rate = (step - s0) / (now - t0)
    eta = (self._total - step) / rate if rate > 0 else float('inf')
    logging.info('%s step %d/%d (%.1f%%): %.2f steps/s, %.1f images/s, '
                 'ETA %s', self._label, step, self._total,
                 100.0 * step / self._total, rate, rate * self._batch,
                 format_seconds(eta))
    self._last_logged = step


def latest_step(model_dir: str) -> int:
  """Global step of the latest checkpoint in `model_dir`; 0 if there is none."""
  checkpoint = tf.train.latest_checkpoint(model_dir)
  if not checkpoint:
    return 0
  return int(tf.train.load_checkpoint(checkpoint).get_tensor(
      tf1.GraphKeys.GLOBAL_STEP))


class CheckpointLogger(tf1.estimator.CheckpointSaverListener):
  """Logs each checkpoint, so users know what a preemption would lose."""

  def after_save(self, session, global_step_value):
    del session
    logging.info('Saved checkpoint at step %d', global_step_value)


def format_seconds(seconds: float) -> str:
  """`1h02m03s` style duration."""
  if seconds == float('inf'):
    return 'unknown'
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'
