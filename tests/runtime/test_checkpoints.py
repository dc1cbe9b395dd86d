"""Tests of tunas_search.runtime.checkpoints: an unfinished save is no checkpoint.

Each kind of unfinished save is built by hand (tests/killed_saves.py) in a
dir of real checkpoints, as a kill at that instant of the Saver's write
leaves it; a real kill is in tests/e2e/test_killed_save.py.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests import killed_saves
from tunas_search.runtime import checkpoints
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.runtime.checkpoints import ModelDirError

tf1 = tf.compat.v1


def _save(directory, steps=(0, 2, 4), keep=5):
  """Sharded checkpoints of a small graph, as the estimator's saver writes."""
  with tf.Graph().as_default():
    w = tf1.get_variable('w', initializer=tf.zeros([32, 32]))
    step = tf1.train.get_or_create_global_step()
    saver = tf1.train.Saver(sharded=True, save_relative_paths=True,
                            max_to_keep=keep)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for s in steps:
        sess.run([w.assign(np.full([32, 32], float(s), np.float32)),
                  step.assign(s)])
        saver.save(sess, os.path.join(directory, 'model.ckpt'), global_step=s,
                   write_meta_graph=False)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    f.write('{}')


def _prefix(directory, step):
  return os.path.join(directory, f'model.ckpt-{step}')


@pytest.mark.parametrize('kind', killed_saves.KINDS)
def test_an_unfinished_save_is_no_checkpoint_and_is_removed(tmp_path, kind):
  directory = str(tmp_path)
  _save(directory)
  before = killed_saves.checkpoint_files(directory)
  garbage = killed_saves.kill_save(directory, kind, 'model.ckpt-4', 6)
  assert checkpoints.unfinished_saves(directory) == [
      os.path.join(directory, name) for name in garbage]
  complete = [_prefix(directory, s) for s in (0, 2, 4)]
  if kind == 'state_file_write':  # Saved whole, not yet recorded: kept.
    complete.append(_prefix(directory, 6))
  assert checkpoints.checkpoint_prefixes(directory) == complete
  model_dir_lib.check(directory)  # Neither damage nor a checkpoint.
  assert model_dir_lib.restore_point(directory) == _prefix(directory, 4)
  assert checkpoints.remove_unfinished_saves(directory) == [
      os.path.join(directory, name) for name in garbage]
  after = killed_saves.checkpoint_files(directory)
  if kind == 'state_file_write':
    del after['model.ckpt-6.index'], after['model.ckpt-6' + killed_saves.DATA]
  assert after == before  # Nothing of the recorded checkpoints changed.
  assert checkpoints.unfinished_saves(directory) == []


def test_the_issue_s_kill_leaves_checkpoint_0_to_resume(tmp_path):
  # Killed while writing the step-100 index: data whole, index empty, the
  # temp dir, the state file naming the step-0 checkpoint.
  directory = str(tmp_path)
  _save(directory, steps=(0,))
  killed_saves.kill_save(directory, 'empty_index', 'model.ckpt-0', 100)
  model_dir_lib.check(directory)
  assert checkpoints.newest_intact(directory) == _prefix(directory, 0)
  with pytest.raises(ModelDirError, match='is not a checkpoint of .*; '
                     'checkpoints: model.ckpt-0$'):
    checkpoints.find_checkpoint(directory, 'model.ckpt-100')
  checkpoints.remove_unfinished_saves(directory)
  assert sorted(os.listdir(directory)) == [
      'checkpoint', 'config.json', 'model.ckpt-0.data-00000-of-00001',
      'model.ckpt-0.index']


def test_a_complete_recorded_checkpoint_damaged_later_is_still_refused(
    tmp_path):
  directory = str(tmp_path)
  _save(directory)
  with open(_prefix(directory, 4) + '.index', 'r+b') as f:
    f.truncate(0)
  assert checkpoints.unfinished_saves(directory) == []
  with pytest.raises(ModelDirError, match=(
      f'checkpoint {_prefix(directory, 4)} cannot be read .*'
      f'--resume_from={_prefix(directory, 2)}')):
    model_dir_lib.check(directory)


def test_data_of_a_recorded_checkpoint_without_its_index_is_left(tmp_path):
  directory = str(tmp_path)
  _save(directory)
  os.remove(_prefix(directory, 2) + '.index')  # The user's damage.
  assert checkpoints.unfinished_saves(directory) == []
  model_dir_lib.check(directory)  # The latest, 4, is whole.


def test_a_deletion_by_keep_checkpoint_max_is_finished(tmp_path):
  # Killed after the state file dropped checkpoint 0, before the Saver
  # deleted it: whole (deletion not begun) or its data alone (index gone).
  directory = str(tmp_path)
  _save(directory, steps=(0, 2, 4, 6))
  tf1.train.update_checkpoint_state(
      directory, 'model.ckpt-6',
      [f'model.ckpt-{s}' for s in (2, 4, 6)])
  zero = [_prefix(directory, 0) + s for s in (killed_saves.DATA, '.index')]
  assert checkpoints.unfinished_saves(directory, keep_checkpoint_max=3) == zero
  # Without keep_checkpoint_max, or with more kept, it is the user's.
  assert checkpoints.unfinished_saves(directory) == []
  assert checkpoints.unfinished_saves(directory, keep_checkpoint_max=4) == []
  os.remove(zero[1])
  assert checkpoints.unfinished_saves(directory) == zero[:1]


def test_a_first_save_killed_before_the_state_file_is_resumed(tmp_path):
  directory = str(tmp_path)
  _save(directory, steps=(0,))
  os.remove(os.path.join(directory, 'checkpoint'))
  model_dir_lib.check(directory)
  assert model_dir_lib.restore_point(directory) == _prefix(directory, 0)
  assert tf.train.latest_checkpoint(directory) is None
  assert checkpoints.remove_unfinished_saves(directory) == []
  assert tf.train.latest_checkpoint(directory) == _prefix(directory, 0)


def test_a_first_save_killed_while_merging_leaves_a_new_run(tmp_path):
  directory = str(tmp_path)
  _save(directory, steps=(0,))
  os.remove(os.path.join(directory, 'checkpoint'))
  with open(_prefix(directory, 0) + '.index', 'r+b') as f:
    f.truncate(7)
  model_dir_lib.check(directory)
  assert model_dir_lib.restore_point(directory) is None
  checkpoints.remove_unfinished_saves(directory)
  assert sorted(os.listdir(directory)) == ['config.json']


def test_a_lost_state_file_beside_later_checkpoints_is_still_refused(
    tmp_path):
  directory = str(tmp_path)
  _save(directory)
  os.remove(os.path.join(directory, 'checkpoint'))
  with pytest.raises(ModelDirError, match='checkpoint state file .* is '
                     f'missing; .*--resume_from={_prefix(directory, 4)}'):
    model_dir_lib.check(directory)


def test_unfinished_saves_in_a_dir_without_config_are_not_ours(tmp_path):
  directory = str(tmp_path)
  killed_saves_dir = tmp_path / 'model.ckpt-6_temp'
  killed_saves_dir.mkdir()
  with pytest.raises(ModelDirError, match='no config.json'):
    model_dir_lib.check(directory)
  assert killed_saves_dir.exists()


def test_step_of_and_join():
  assert checkpoints.step_of('/run/model.ckpt-300') == 300
  assert checkpoints.step_of('/run/model.ckpt') is None
  assert checkpoints.join('/run', 'model.ckpt-3') == '/run/model.ckpt-3'


def test_a_garbage_state_file_leaves_every_checkpoint_file(tmp_path):
  # Without a record to compare with, only temp dirs are garbage: the run
  # is refused, and --resume_from's new state file decides the rest.
  directory = str(tmp_path)
  _save(directory)
  killed_saves.kill_save(directory, 'empty_index', 'model.ckpt-4', 6)
  with open(os.path.join(directory, 'checkpoint'), 'w') as f:
    f.write('garbage')
  assert checkpoints.unfinished_saves(directory) == [
      os.path.join(directory, 'model.ckpt-6_temp')]
  with pytest.raises(ModelDirError, match='is not a checkpoint state file.*'
                     f'--resume_from={_prefix(directory, 4)}'):
    model_dir_lib.check(directory)
  model_dir_lib.check(directory, resume_from='model.ckpt-4')
  assert model_dir_lib.restore_point(directory, 'model.ckpt-4') == _prefix(
      directory, 4)
