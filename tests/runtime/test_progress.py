"""Tests for the progress, step-tracking and checkpoint-logging hooks."""

import pytest
import tensorflow as tf

from tunas_search.runtime import progress

tf1 = tf.compat.v1

def test_format_seconds():
  assert progress.format_seconds(59) == '0m59s'
  assert progress.format_seconds(3723) == '1h02m03s'
  assert progress.format_seconds(float('inf')) == 'unknown'


def test_checkpoint_logger_logs_the_step(monkeypatch):
  messages = []
  monkeypatch.setattr(progress.logging, 'info',
                      lambda fmt, *args: messages.append(fmt % args))
  progress.CheckpointLogger().after_save(None, 120)
  assert messages == ['Saved checkpoint at step 120']


@pytest.mark.parametrize('steps_per_run, total, expected', [
    (1, 100, (7, 7)),  # CPU: one step a run.
    (3, 100, (7, 9)),  # TPU: one host loop a run.
    (3, 8, (7, 8)),  # The last host loop stops at the total.
])
def test_step_tracker_names_the_steps_of_the_run_that_failed(
    steps_per_run, total, expected):
  with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    train = step.assign_add(steps_per_run)
    with tf.control_dependencies([train]):
      # NaN once the run has gone past step 6, like a diverged model.
      loss = tf.where(step.read_value() > 6, float('nan'), 1.0)
    tracker = progress.StepTracker(steps_per_run, total)
    with pytest.raises(tf1.train.NanLossDuringTrainingError):
      with tf1.train.MonitoredSession(
          hooks=[tracker, tf1.train.NanTensorHook(loss)]) as sess:
        while True:
          sess.run(train)
  assert tracker.last_run_steps == expected


def test_step_tracker_counts_from_a_restored_step():
  with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    train = step.assign_add(1)
    restore = step.assign(40)  # Stands in for restoring a checkpoint.
    tracker = progress.StepTracker(steps_per_run=1, total_steps=100)
    scaffold = tf1.train.Scaffold(
        init_fn=lambda scaffold, sess: sess.run(restore))
    with tf1.train.MonitoredSession(
        session_creator=tf1.train.ChiefSessionCreator(scaffold=scaffold),
        hooks=[tracker]) as sess:
      sess.run(train)
      sess.run(train)
  assert tracker.last_run_steps == (42, 42)


class _RunValues:
  def __init__(self, step):
    self.results = step


def test_progress_hook_logs_first_step_then_rates_and_eta(monkeypatch):
  logged = []
  monkeypatch.setattr(progress.logging, 'info',
                      lambda fmt, *args: logged.append(fmt % args))
  clock = iter([100.0, 102.0, 104.0, 106.0])
  monkeypatch.setattr(progress.time, 'time', lambda: next(clock))
  hook = progress.ProgressHook(total_steps=10, batch_size=8, every_n_steps=2)
  for step in range(4):  # The global step read before each update.
    hook.after_run(None, _RunValues(step))
  # The first run (graph optimisation) is announced, not timed; rates are
  # measured from its end: 1 step in 2 s, then 3 steps in 6 s.
  assert logged == [
      'search: first step done (step 1)',
      'search step 2/10 (20.0%): 0.50 steps/s, 4.0 images/s, ETA 0m16s',
      'search step 4/10 (40.0%): 0.50 steps/s, 4.0 images/s, ETA 0m12s']


def test_progress_hook_reports_the_graph_size_with_the_first_step(
    monkeypatch):
  logged = []
  monkeypatch.setattr(progress.logging, 'info',
                      lambda fmt, *args: logged.append(fmt % args))
  with tf.Graph().as_default() as graph:
    tf1.train.create_global_step()
    tf.constant(1.0) + tf.constant(2.0)  # pylint: disable=expression-not-assigned
    hook = progress.ProgressHook(total_steps=10, batch_size=8, every_n_steps=2)
    hook.begin()
    ops = len(graph.get_operations())
  hook.after_run(None, _RunValues(0))
  assert logged == [f'search: first step done (step 1; a graph of {ops} ops)']
