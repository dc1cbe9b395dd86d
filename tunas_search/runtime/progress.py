"""Progress of a run: steps/s and ETA, a session run's steps, checkpoints."""

import time
from typing import Optional, Tuple

from absl import logging
import tensorflow as tf

tf1 = tf.compat.v1


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
    self._graph_ops: Optional[int] = None

  def begin(self):
    self._step = tf1.train.get_global_step()
    # The graph's size drives start-up (building, Grappler, the first run).
    self._graph_ops = len(tf1.get_default_graph().get_operations())

  def before_run(self, run_context):
    return tf1.train.SessionRunArgs(self._step)

  def after_run(self, run_context, run_values):
    step = int(run_values.results) + 1  # The value read before the update.
    now = time.time()
    if self._last is None:
      # The first run pays for graph optimisation; rates start after it.
      if self._graph_ops is None:
        logging.info('%s: first step done (step %d)', self._label, step)
      else:
        logging.info('%s: first step done (step %d; a graph of %d ops)',
                     self._label, step, self._graph_ops)
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


class StepTracker(tf1.train.SessionRunHook):
  """Knows which steps the latest session run covers, even when it failed.

  TPUEstimator stops a run whose loss is NaN by raising from a hook's
  `after_run`; the steps of the failed run are then `last_run_steps`. On CPU a
  run is one step; on TPU it is one host loop of `steps_per_run` steps.
  Steps are numbered like checkpoints: step n takes the global step from
  n - 1 to n.
  """

  def __init__(self, steps_per_run: int, total_steps: int):
    self._per_run = max(1, steps_per_run)
    self._total = total_steps
    self._done = 0
    self.last_run_steps: Optional[Tuple[int, int]] = None

  def begin(self):
    self._step = tf1.train.get_global_step()

  def after_create_session(self, session, coord):
    del coord
    self._done = int(session.run(self._step))

  def before_run(self, run_context):
    # Recorded before the run, so it is right whatever hook raises after it.
    first = self._done + 1
    self.last_run_steps = (first, min(self._done + self._per_run,
                                      max(first, self._total)))

  def after_run(self, run_context, run_values):
    # A separate read: fetching the step alongside the train op could return
    # its value from before or after the update.
    self._done = int(run_context.session.run(self._step))


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
