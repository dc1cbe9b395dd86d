"""Tests of tunas_search.runtime.checkpoints: one definition of a checkpoint, and a
clean-up that deletes only what a killed save provably left.

Each kind of unfinished save is built by hand (tests/killed_saves.py) in a
dir of real checkpoints, as a kill at that instant of the Saver's write
leaves it; a real kill is in tests/e2e/test_killed_save.py. Every test that
cleans up counts the complete checkpoints before and after (TensorFlow's
reader, not the code under test): none may disappear.
"""

import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests import killed_saves
from tunas_search.runtime import checkpoints
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.runtime.checkpoints import ModelDirError

tf1 = tf.compat.v1
DATA = killed_saves.DATA


def _save(directory, steps=(0, 2, 4), keep=5):
  """Sharded checkpoints of a small graph, as the estimator's saver writes."""
  os.makedirs(directory, exist_ok=True)
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


def _prefix(directory, step, name='model.ckpt'):
  return os.path.join(directory, f'{name}-{step}')


def _clean_up(directory):
  """A run's start: the clean-up under the lock, then the restore point."""
  complete = killed_saves.complete_checkpoints(directory)
  with model_dir_lib.exclusive(directory) as lock:
    removed = model_dir_lib.remove_unfinished_saves(lock)
    model_dir_lib.prepare_restore(directory)
  assert complete.keys() <= killed_saves.complete_checkpoints(
      directory).keys(), 'a complete checkpoint was deleted'
  return removed


@pytest.mark.parametrize('kind', killed_saves.KINDS)
def test_an_unfinished_save_is_no_checkpoint_and_is_removed(tmp_path, kind):
  directory = str(tmp_path)
  _save(directory)
  before = killed_saves.checkpoint_files(directory)
  garbage = killed_saves.kill_save(directory, kind, 'model.ckpt-4', 6)
  expected = [os.path.join(directory, name) for name in garbage]
  assert checkpoints.unfinished_saves(directory) == expected
  complete = [_prefix(directory, s) for s in (0, 2, 4)]
  if kind in killed_saves.COMPLETE_KINDS:  # Saved whole, not recorded: kept.
    complete.append(_prefix(directory, 6))
  assert checkpoints.checkpoint_prefixes(directory) == complete
  model_dir_lib.check(directory)  # Neither damage nor a checkpoint.
  assert model_dir_lib.restore_point(directory) == _prefix(directory, 4)
  assert _clean_up(directory) == expected
  after = killed_saves.checkpoint_files(directory)
  if kind in killed_saves.COMPLETE_KINDS:
    del after['model.ckpt-6.index'], after['model.ckpt-6' + DATA]
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
  with pytest.raises(ModelDirError, match=r'is not a checkpoint of .* \(its '
                     r'save did not finish\); checkpoints: model.ckpt-0$'):
    checkpoints.find_checkpoint(directory, 'model.ckpt-100')
  _clean_up(directory)
  assert sorted(os.listdir(directory)) == [
      'checkpoint', 'config.json', 'model.ckpt-0' + DATA,
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


def test_what_a_cut_short_keep_checkpoint_max_deletion_leaves_stays(tmp_path):
  # Killed after the state file dropped checkpoint 0, before the Saver
  # deleted it: whole (deletion not begun), or its data alone (index gone).
  # Neither is provably garbage: a restored backup looks the same.
  directory = str(tmp_path)
  _save(directory, steps=(0, 2, 4, 6))
  tf1.train.update_checkpoint_state(
      directory, 'model.ckpt-6', [f'model.ckpt-{s}' for s in (2, 4, 6)])
  assert checkpoints.unfinished_saves(directory) == []
  assert checkpoints.checkpoint_prefixes(directory)[0] == _prefix(directory, 0)
  assert _clean_up(directory) == []
  os.remove(_prefix(directory, 0) + '.index')
  assert checkpoints.unfinished_saves(directory) == []
  assert _clean_up(directory) == []
  assert os.path.exists(_prefix(directory, 0) + DATA)
  assert checkpoints.checkpoint_prefixes(directory) == [
      _prefix(directory, s) for s in (2, 4, 6)]


def test_a_first_save_killed_before_the_state_file_is_resumed(tmp_path):
  directory = str(tmp_path)
  _save(directory, steps=(0,))
  os.remove(os.path.join(directory, 'checkpoint'))
  model_dir_lib.check(directory)
  assert model_dir_lib.restore_point(directory) == _prefix(directory, 0)
  assert tf.train.latest_checkpoint(directory) is None
  assert _clean_up(directory) == []
  assert tf.train.latest_checkpoint(directory) == _prefix(directory, 0)
  # Recorded as the Saver would have: its own, deleted in its turn.
  state = tf.train.get_checkpoint_state(directory)
  assert list(state.all_model_checkpoint_paths) == [_prefix(directory, 0)]


def test_a_first_save_killed_while_merging_leaves_a_new_run(tmp_path):
  source = str(tmp_path / 'source')
  _save(source, steps=(0,))
  directory = str(tmp_path / 'run')
  os.makedirs(directory)
  shutil.copyfile(os.path.join(source, 'config.json'),
                  os.path.join(directory, 'config.json'))
  killed_saves.kill_save(directory, 'partial_index', '../source/model.ckpt-0',
                         0)
  model_dir_lib.check(directory)
  assert model_dir_lib.restore_point(directory) is None
  _clean_up(directory)
  assert sorted(os.listdir(directory)) == ['config.json']


def test_a_damaged_first_checkpoint_without_its_temp_dir_is_refused(
    tmp_path):
  # No temp dir: nothing proves a save was cut short, so it is damage.
  directory = str(tmp_path)
  _save(directory, steps=(0,))
  os.remove(os.path.join(directory, 'checkpoint'))
  killed_saves.truncate(_prefix(directory, 0) + '.index', 0.5)
  before = killed_saves.checkpoint_files(directory)
  with pytest.raises(ModelDirError, match=(
      f'checkpoint {_prefix(directory, 0)} cannot be read .*no intact '
      'checkpoint is left')):
    model_dir_lib.check(directory)
  assert checkpoints.unfinished_saves(directory) == []
  assert killed_saves.checkpoint_files(directory) == before


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


# The issue's cases (issue 53): a finished run holding 2, 4, 6 of
# keep_checkpoint_max=3, as the smoke preset leaves steps 20, 30, 40.


@pytest.fixture(name='finished')
def _finished(tmp_path):
  """(a finished run's dir, a dir holding another run's checkpoint 0)."""
  other = str(tmp_path / 'other')
  _save(other, steps=(0,))
  directory = str(tmp_path / 'run')
  _save(directory, steps=(0, 2, 4, 6), keep=3)
  assert checkpoints.checkpoint_prefixes(directory) == [
      _prefix(directory, s) for s in (2, 4, 6)]
  return directory, _prefix(other, 0)


@pytest.mark.parametrize('name', ['milestone.ckpt', 'model.ckpt'])
def test_a_checkpoint_kept_by_hand_is_never_removed(finished, name, caplog):
  # Case 1: a copy older than every listed checkpoint, beside a full list.
  directory, other = finished
  kept = _prefix(directory, 0, name)
  killed_saves.copy_checkpoint(other, kept)
  before = killed_saves.checkpoint_files(directory)
  assert checkpoints.unfinished_saves(directory) == []
  assert kept in checkpoints.checkpoint_prefixes(directory)
  with caplog.at_level(logging.INFO):
    assert _clean_up(directory) == []
  assert killed_saves.checkpoint_files(directory) == before
  assert not caplog.records  # Not in the way: not a word.


def test_resume_from_a_copied_in_checkpoint_keeps_it(finished):
  # Case 2: the check, the clean-up and the resume agree on the target, and
  # the Saver (which deletes only what the state file lists) never
  # deletes it.
  directory, other = finished
  killed_saves.copy_checkpoint(other, _prefix(directory, 0))
  model_dir_lib.check(directory, resume_from='model.ckpt-0')
  complete = killed_saves.complete_checkpoints(directory)
  with model_dir_lib.exclusive(directory) as lock:
    assert model_dir_lib.remove_unfinished_saves(lock) == []
    assert model_dir_lib.prepare_restore(directory, 'model.ckpt-0') == (
        _prefix(directory, 0))
  assert killed_saves.complete_checkpoints(directory) == complete
  state = tf.train.get_checkpoint_state(directory)
  assert state.model_checkpoint_path == _prefix(directory, 0)
  assert list(state.all_model_checkpoint_paths) == []


def test_resume_from_lists_only_what_the_state_file_listed(finished):
  directory, other = finished
  killed_saves.copy_checkpoint(other, _prefix(directory, 0))  # A backup.
  checkpoints.resume_from(directory, 'model.ckpt-4')
  state = tf.train.get_checkpoint_state(directory)
  assert state.model_checkpoint_path == _prefix(directory, 4)
  assert list(state.all_model_checkpoint_paths) == [
      _prefix(directory, 2), _prefix(directory, 4)]


def test_a_damaged_newest_checkpoint_is_refused_never_removed(finished,
                                                              caplog):
  # Case 3: refused; resumed from the older one on request; the resumed run
  # killed before it saved; the plain rerun resumes in one line, and the
  # damaged files are still there (never called "did not finish").
  directory, _ = finished
  killed_saves.truncate(_prefix(directory, 6) + DATA, 0.5)
  damaged = {k: v for k, v in killed_saves.checkpoint_files(directory).items()
             if k.startswith('model.ckpt-6')}
  with pytest.raises(ModelDirError, match=(
      f'--resume_from={_prefix(directory, 4)} to continue')):
    model_dir_lib.check(directory)
  model_dir_lib.check(directory, resume_from=_prefix(directory, 4))
  with model_dir_lib.exclusive(directory) as lock:
    assert model_dir_lib.remove_unfinished_saves(lock) == []
    model_dir_lib.prepare_restore(directory, _prefix(directory, 4))
  # Killed here. The rerun of the plain command:
  model_dir_lib.check(directory)
  caplog.clear()
  with caplog.at_level(logging.INFO):
    assert _clean_up(directory) == []
  lines = [r.getMessage() for r in caplog.records]
  assert len(lines) == 1, lines
  assert ('model.ckpt-6 (cannot be read: ' in lines[0] and
          'did not finish' not in lines[0]), lines
  assert {k: v for k, v in killed_saves.checkpoint_files(directory).items()
          if k.startswith('model.ckpt-6')} == damaged
  assert model_dir_lib.restore_point(directory) == _prefix(directory, 4)


def test_a_remote_dir_is_never_cleaned_up(finished, caplog):
  # Case 4: a dir with a scheme (file://, as gs://) cannot be locked, so a
  # run there may be saving: its temp dir and files are left.
  directory, _ = finished
  killed_saves.kill_save(directory, 'empty_index', 'model.ckpt-6', 8)
  remote = 'file://' + directory
  before = killed_saves.checkpoint_files(directory)
  assert [os.path.basename(p) for p in
          checkpoints.unfinished_saves(remote)] == [
              'model.ckpt-8.data-00000-of-00001', 'model.ckpt-8.index',
              'model.ckpt-8_temp']
  model_dir_lib.check(remote)
  with caplog.at_level(logging.INFO):
    with model_dir_lib.exclusive(remote) as lock:
      assert not lock.held
      lock.acquire()
      assert model_dir_lib.remove_unfinished_saves(lock) == []
  assert killed_saves.checkpoint_files(directory) == before
  assert os.path.isdir(os.path.join(directory, 'model.ckpt-8_temp'))
  assert any('Left 3 file(s) of checkpoint saves that did not finish in '
             f'{remote}: it is not a local directory' in r.getMessage()
             for r in caplog.records)
  assert checkpoints.find_checkpoint(remote, 'model.ckpt-6') == (
      remote + '/model.ckpt-6')


def test_a_complete_checkpoint_in_the_way_is_named_in_one_line(finished,
                                                               caplog):
  # A whole checkpoint beside a temp dir (killed before the merge deleted
  # it), newer than the state file: only the temp dir goes; the run will
  # save over the checkpoint, and says so.
  directory, _ = finished
  garbage = killed_saves.kill_save(directory, 'index_written', 'model.ckpt-6',
                                   8)
  with caplog.at_level(logging.INFO):
    assert _clean_up(directory) == [os.path.join(directory, garbage[0])]
  lines = [r.getMessage() for r in caplog.records]
  assert len(lines) == 2 and 'Removed 1 file(s)' in lines[0], lines
  assert 'model.ckpt-8 (complete), newer than the checkpoint' in lines[1]
  assert _prefix(directory, 8) in checkpoints.checkpoint_prefixes(directory)


def test_the_listings_and_the_clean_up_never_disagree(finished):
  # Every kind of kill, copies under other names, damage, in one dir: no
  # file is both a checkpoint's and garbage; every complete checkpoint is
  # listed and can be resumed from, exported or analysed.
  directory, other = finished
  for step, kind in enumerate(killed_saves.KINDS):
    if kind != 'state_file_write':
      killed_saves.kill_save(directory, kind, 'model.ckpt-6', 10 + step)
  killed_saves.copy_checkpoint(other, _prefix(directory, 0, 'milestone.ckpt'))
  killed_saves.copy_checkpoint(other, _prefix(directory, 0))
  killed_saves.copy_checkpoint(_prefix(directory, 6), _prefix(directory, 30))
  killed_saves.truncate(_prefix(directory, 30) + DATA, 0.5)
  garbage = set(checkpoints.unfinished_saves(directory))
  listed = checkpoints.checkpoint_prefixes(directory)
  for prefix in listed:
    assert not {prefix + '.index', prefix + DATA} & garbage, prefix
  complete = killed_saves.complete_checkpoints(directory)
  assert {os.path.basename(p) for p in listed} == set(complete) | {
      'model.ckpt-30'}
  for name in complete:
    assert checkpoints.find_checkpoint(directory, name) == os.path.join(
        directory, name)
  with pytest.raises(ModelDirError, match='model.ckpt-30 cannot be read'):
    checkpoints.find_checkpoint(directory, 'model.ckpt-30')
  _clean_up(directory)
  assert killed_saves.complete_checkpoints(directory) == complete
  assert not set(os.listdir(directory)) & {os.path.basename(p)
                                           for p in garbage}
