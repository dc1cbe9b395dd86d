"""A disk that fills up while a search or train_eval saves a checkpoint or
writes its events: one line naming the path, the checkpoints recorded
before intact, and a rerun after space is freed resumes.

The full disk is injected, not provoked: the Saver's save and the events
writer's flush raise exactly what TensorFlow raises on a full disk (see
tests/test_model_dir.py), after the Saver has left what a failed write
leaves (its temp dir). The rerun finds the disk still full until it has
freed the failed save's space, so it must do that before any write.
"""

import builtins
import errno
import os

import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.search import runner

tf1 = tf.compat.v1
_NO_SPACE = 'No space left on device'


def _full_disk_at_save(monkeypatch, step):
  """The Saver's save of `step` fails as on a full disk; returns the path."""
  save = tf1.train.Saver.save
  failed = []

  def failing_save(self, sess, save_path, global_step=None, **kwargs):
    if global_step == step:
      temp = f'{save_path}-{step}_temp'
      os.makedirs(temp)
      part = os.path.join(temp, 'part-00000-of-00001.data-00000-of-00001'
                          '.tempstate42')
      with open(part, 'wb') as f:
        f.write(b'\0' * 100)  # What fitted.
      failed.append(part)
      raise tf.errors.ResourceExhaustedError(
          None, None, f'Graph execution error:\n\n{part}; {_NO_SPACE}\n\t '
          '[[{{node save/SaveV2}}]]')
    return save(self, sess, save_path, global_step=global_step, **kwargs)
  monkeypatch.setattr(tf1.train.Saver, 'save', failing_save)
  return failed


def _full_disk_at_events_flush(monkeypatch, model_dir, after_checkpoint):
  """The events writer's flush fails once `after_checkpoint` is recorded."""
  flush = tf1.summary.FileWriter.flush

  def failing_flush(self):
    latest = tf.train.latest_checkpoint(model_dir) or ''
    if latest.endswith(f'-{after_checkpoint}'):
      path = self.get_logdir() + '/events.out.tfevents.1.vm'
      raise RuntimeError(f'{path}; {_NO_SPACE}\n\tFailed to flush 2 events '
                         f'to {path}')
    return flush(self)
  monkeypatch.setattr(tf1.summary.FileWriter, 'flush', failing_flush)


def _full_until_freed(monkeypatch, model_dir, temp):
  """A disk still full as long as the failed save's temp dir `temp` is
  there: every write under `model_dir` fails as TensorFlow's file system and
  Python's report it. A rerun must free that space before it writes."""
  gfile, real_open = tf.io.gfile.GFile, builtins.open

  def full(path, mode):
    return (any(m in mode for m in 'wax+') and
            str(path).startswith(model_dir) and os.path.isdir(temp))

  class FullGFile(gfile):

    def __init__(self, name, mode='r'):
      if full(name, mode):
        raise tf.errors.ResourceExhaustedError(None, None,
                                               f'{name}; {_NO_SPACE}')
      super().__init__(name, mode)

  def full_open(file, mode='r', *args, **kwargs):
    if full(file, mode):
      raise OSError(errno.ENOSPC, _NO_SPACE, file)
    return real_open(file, mode, *args, **kwargs)
  monkeypatch.setattr(tf.io.gfile, 'GFile', FullGFile)
  monkeypatch.setattr(builtins, 'open', full_open)


def _intact(model_dir, steps):
  for step in steps:
    prefix = os.path.join(model_dir, f'model.ckpt-{step}')
    assert model_dir_lib.damage(prefix) is None, prefix


def test_search_stops_on_a_full_disk_and_resumes_after(tmp_path):
  model_dir = str(tmp_path / 'run')
  config = tiny.tiny_config(model_dir, max_steps=4)
  events = os.path.join(model_dir, 'events.out.tfevents.1.vm')
  # The events write after checkpoint 2: checkpoints 0 and 2 recorded.
  with pytest.MonkeyPatch.context() as patch:
    _full_disk_at_events_flush(patch, model_dir, after_checkpoint=2)
    with pytest.raises(model_dir_lib.DiskFullError) as raised:
      runner.run_search(config, tiny.tiny_spec())
  latest = os.path.join(model_dir, 'model.ckpt-2')
  assert str(raised.value) == (
      f'no space left on device writing {events}; the run stopped and '
      f'checkpoints up to {latest} are intact: free disk space and rerun the '
      'same command to resume')
  _intact(model_dir, (0, 2))
  # The rerun resumes from 2; its save of 4 finds the disk full.
  with pytest.MonkeyPatch.context() as patch:
    failed = _full_disk_at_save(patch, 4)
    with pytest.raises(model_dir_lib.DiskFullError) as raised:
      runner.run_search(config, tiny.tiny_spec())
  assert str(raised.value).startswith(
      f'no space left on device writing {failed[0]}; the run stopped and '
      f'checkpoints up to {latest} are intact')
  assert tf.train.latest_checkpoint(model_dir) == latest
  _intact(model_dir, (0, 2))
  # The disk still full but for the failed save: the rerun frees its space
  # before it writes anything, and resumes from 2.
  with pytest.MonkeyPatch.context() as patch:
    _full_until_freed(patch, model_dir, os.path.dirname(failed[0]))
    result = runner.run_search(config, tiny.tiny_spec())
  assert result.step == 4
  _intact(model_dir, (0, 2, 4))
  assert not os.path.exists(os.path.join(model_dir, 'model.ckpt-4_temp'))
  reader = tf.train.load_checkpoint(model_dir)
  assert reader.get_tensor('rlcontroller/baseline/count') == 4


def test_train_eval_stops_on_a_full_disk_and_resumes_after(tmp_path,
                                                           monkeypatch):
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  model_dir = str(tmp_path / 'run')
  config = test_train_eval.make_config(model_dir, mode='train', max_steps=2,
                                       save_checkpoints_steps=1)
  failed = _full_disk_at_save(monkeypatch, 2)
  with pytest.raises(model_dir_lib.DiskFullError) as raised:
    train_eval.run(config, test_train_eval.SPEC)
  assert str(raised.value).startswith(
      f'no space left on device writing {failed[0]}; the run stopped and '
      f'checkpoints up to {model_dir}/model.ckpt-1 are intact')
  _intact(model_dir, (0, 1))
  monkeypatch.undo()
  _full_until_freed(monkeypatch, model_dir, os.path.dirname(failed[0]))
  assert train_eval.run(config, test_train_eval.SPEC) is None
  _intact(model_dir, (0, 1, 2))
  assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-2')
