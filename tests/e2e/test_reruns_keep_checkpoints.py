"""A rerun never loses a complete checkpoint, and a rerun after a kill
resumes where the kill left it (tiny space, real runs; issue 53's cases).

Each test counts the complete checkpoints before and after every rerun
(`killed_saves.complete_checkpoints`, TensorFlow's reader alone): none may
disappear. A resume is proven by its step and values, not by the run
finishing: the rerun past a killed save logs the step it resumed from and
computes what a resume from the same checkpoint on request computes, which
differs from what the uninterrupted run (and so a restart from step 0)
computes, since a resumed run reads its input from the start again.
"""

import glob
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests import killed_saves
from tests.e2e import tiny
from tunas_search.runtime import checkpoints
from tunas_search.search import runner
from tunas_search.runtime.model_dir import ModelDirError

# What a search's resume must restore besides the step: the controller's
# logits (one variable per number of choices), its EMA reward baseline, and
# the network's weights (here the classifier's).
_RESTORED = ('rlcontroller/baseline/ema', 'rlcontroller/logits/choices_2',
             'rlcontroller/logits/choices_3', 'classifier/bias',
             'classifier/kernel')


def _copy(finished, tmp_path, name='copy'):
  target = str(tmp_path / name)
  shutil.copytree(finished, target)
  return target


def _values(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in
          _RESTORED + ('global_step', 'rlcontroller/baseline/count')}


def _messages(caplog):
  return [r.getMessage() for r in caplog.records if r.name == 'absl']


def _rerun(model_dir, caplog, **kwargs):
  """Runs the search, returning (its result, its log lines); asserts that no
  complete checkpoint disappeared."""
  local = model_dir[len('file://'):] if model_dir.startswith(
      'file://') else model_dir
  before = killed_saves.complete_checkpoints(local)
  caplog.clear()
  with caplog.at_level(logging.INFO):
    try:
      result = runner.run_search(
          tiny.tiny_config(model_dir, **kwargs.pop('overrides', {})),
          tiny.tiny_spec(), **kwargs)
    finally:
      after = killed_saves.complete_checkpoints(local)
      assert before.keys() <= after.keys(), (before.keys(), after.keys())
  return result, _messages(caplog)


@pytest.fixture(scope='module')
def resumed_on_request(finished, tmp_path_factory):
  """The values a resume from checkpoint 2 of the finished search computes
  at step 4 (`--resume_from=model.ckpt-2`)."""
  model_dir = _copy(finished, tmp_path_factory.mktemp('on_request'))
  runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                    tiny.tiny_spec(), resume_from='model.ckpt-2')
  return _values(os.path.join(model_dir, 'model.ckpt-4'))


@pytest.mark.parametrize('kind', [
    'empty_index',  # The kind of issue 44.
    *(pytest.param(k, marks=pytest.mark.slow) for k in killed_saves.KINDS
      if k != 'empty_index')])
def test_a_rerun_after_a_killed_save_resumes_its_values(
    finished, resumed_on_request, tmp_path, caplog, kind):
  # The finished search as it was when its save of 4 was killed at `kind`.
  model_dir = _copy(finished, tmp_path)
  for path in glob.glob(os.path.join(model_dir, 'model.ckpt-4.*')):
    os.remove(path)
  checkpoints.write_state(model_dir, os.path.join(model_dir, 'model.ckpt-2'),
                          [os.path.join(model_dir, f'model.ckpt-{s}')
                           for s in (0, 2)])
  killed_saves.kill_save(model_dir, kind, 'model.ckpt-2', 4)
  result, lines = _rerun(model_dir, caplog, overrides={'max_steps': 4})
  assert result.step == 4
  assert any(f'search of tiny in {model_dir}: step 2 of 4' in line
             for line in lines), lines
  resumed = _values(os.path.join(model_dir, 'model.ckpt-4'))
  uninterrupted = _values(os.path.join(finished, 'model.ckpt-4'))
  assert resumed['global_step'] == 4
  assert resumed['rlcontroller/baseline/count'] == 4
  for name in _RESTORED:
    np.testing.assert_allclose(resumed[name], resumed_on_request[name],
                               rtol=1e-5, atol=1e-6, err_msg=name)
  # A restart from step 0 computes the uninterrupted run's values. They
  # differ in the weights, trained on other batches (the controller's may
  # coincide: its reward is the accuracy on a few images).
  assert max(np.max(np.abs(uninterrupted[name] - resumed_on_request[name]))
             for name in _RESTORED) > 1e-4


def _rotated(finished, tmp_path):
  """The finished search with keep_checkpoint_max=2: checkpoint 0 deleted
  by the Saver (not listed any more); returns (dir, a backup of 0)."""
  model_dir = _copy(finished, tmp_path)
  backup = str(tmp_path / 'backup.ckpt-0')
  killed_saves.copy_checkpoint(os.path.join(model_dir, 'model.ckpt-0'),
                               backup)
  for path in glob.glob(os.path.join(model_dir, 'model.ckpt-0.*')):
    os.remove(path)
  checkpoints.write_state(model_dir, os.path.join(model_dir, 'model.ckpt-4'),
                          [os.path.join(model_dir, f'model.ckpt-{s}')
                           for s in (2, 4)])
  return model_dir, backup


class _KilledWhileBuilding:
  """An input function that stops the run as a kill while it builds the
  graph would: after the run's start has rewritten the state file."""

  def __call__(self, params):
    raise KeyboardInterrupt('killed')


@pytest.mark.parametrize('name', ['milestone.ckpt-0', 'model.ckpt-0'])
def test_a_rerun_keeps_a_checkpoint_kept_by_hand(finished, tmp_path, caplog,
                                                 name):
  # Case 1: a copy under another name, or a backup restored under its own,
  # older than every listed checkpoint while the state lists
  # keep_checkpoint_max of them.
  model_dir, backup = _rotated(finished, tmp_path)
  killed_saves.copy_checkpoint(backup, os.path.join(model_dir, name))
  before = killed_saves.checkpoint_files(model_dir)
  result, lines = _rerun(model_dir, caplog, overrides={
      'max_steps': 4, 'keep_checkpoint_max': 2})
  assert result.step == 4
  assert killed_saves.checkpoint_files(model_dir) == before
  assert not any('did not finish' in line for line in lines), lines


def test_resume_from_a_copied_in_checkpoint_starts_from_it(
    finished, tmp_path, caplog):
  # Case 2, up to the graph: the check, the clean-up and the resume agree
  # on the target, which the state file then names but does not list for
  # the Saver to delete.
  model_dir, backup = _rotated(finished, tmp_path)
  killed_saves.copy_checkpoint(backup, os.path.join(model_dir, 'model.ckpt-0'))
  with pytest.raises(KeyboardInterrupt):
    _rerun(model_dir, caplog, resume_from='model.ckpt-0',
           input_fn=_KilledWhileBuilding(),
           overrides={'max_steps': 4, 'keep_checkpoint_max': 2})
  lines = _messages(caplog)
  assert any(f'in {model_dir}: step 0 of 4' in line for line in lines), lines
  state = tf.train.get_checkpoint_state(model_dir)
  assert state.model_checkpoint_path == os.path.join(model_dir,
                                                     'model.ckpt-0')
  assert list(state.all_model_checkpoint_paths) == []


@pytest.mark.slow  # Trains 4 steps; the test above is its fast variant.
def test_resume_from_a_copied_in_checkpoint_resumes_and_keeps_it(
    finished, tmp_path, caplog):
  # Case 2: the run resumes from the target and saves keep_checkpoint_max
  # newer ones; the Saver's deletions leave the target (only what the state
  # file listed goes).
  model_dir, backup = _rotated(finished, tmp_path)
  target = os.path.join(model_dir, 'model.ckpt-0')
  killed_saves.copy_checkpoint(backup, target)
  result, lines = _rerun(model_dir, caplog, resume_from='model.ckpt-0',
                         overrides={'max_steps': 4, 'keep_checkpoint_max': 2})
  assert result.step == 4
  assert any(f'in {model_dir}: step 0 of 4' in line for line in lines), lines
  assert 'model.ckpt-0' in killed_saves.complete_checkpoints(model_dir)
  with open(target + '.index', 'rb') as f, open(backup + '.index',
                                                'rb') as g:
    assert f.read() == g.read()


def test_a_damaged_checkpoint_is_refused_then_left_never_removed(
    finished, tmp_path, caplog):
  # Case 3: refused; resumed from 2 on request, killed while building the
  # graph; the plain rerun resumes from 2 in one line naming the damaged
  # checkpoint (never "did not finish"), whose files stay as they were.
  model_dir = _copy(finished, tmp_path)
  killed_saves.truncate(os.path.join(model_dir, 'model.ckpt-4' +
                                     killed_saves.DATA), 0.5)
  damaged = {k: v for k, v in killed_saves.checkpoint_files(model_dir).items()
             if k.startswith('model.ckpt-4')}
  with pytest.raises(ModelDirError, match='--resume_from=.*model.ckpt-2'):
    _rerun(model_dir, caplog, overrides={'max_steps': 4})
  with pytest.raises(KeyboardInterrupt):
    _rerun(model_dir, caplog, resume_from='model.ckpt-2',
           input_fn=_KilledWhileBuilding(), overrides={'max_steps': 4})
  with pytest.raises(KeyboardInterrupt):
    _rerun(model_dir, caplog, input_fn=_KilledWhileBuilding(),
           overrides={'max_steps': 4})
  lines = _messages(caplog)
  assert any(f'in {model_dir}: step 2 of 4' in line for line in lines), lines
  left = [line for line in lines if 'model.ckpt-4' in line]
  assert len(left) == 1 and 'model.ckpt-4 (cannot be read: ' in left[0], lines
  assert not any('did not finish' in line for line in lines), lines
  assert {k: v for k, v in killed_saves.checkpoint_files(model_dir).items()
          if k.startswith('model.ckpt-4')} == damaged


def test_a_remote_model_dir_is_never_cleaned_up(finished, tmp_path, caplog):
  # Case 4: a dir with a scheme (file://, as gs://) has no lock: another run
  # may be saving there, so its temp dir and files stay.
  model_dir = _copy(finished, tmp_path)
  killed_saves.kill_save(model_dir, 'empty_index', 'model.ckpt-4', 6)
  before = killed_saves.checkpoint_files(model_dir)
  result, lines = _rerun('file://' + model_dir, caplog,
                         overrides={'max_steps': 4})
  assert result.step == 4
  assert killed_saves.checkpoint_files(model_dir) == before
  assert os.path.isdir(os.path.join(model_dir, 'model.ckpt-6_temp'))
  assert any('Left 3 file(s) of checkpoint saves that did not finish' in line
             for line in lines), lines
