"""A search refuses a busy or damaged model dir, resumes on request, and
keeps its disk use bounded across restarts (tiny space, real runs)."""

import dataclasses
import glob
import os
import shutil

import pytest
import tensorflow as tf

from tunas_search.results import analysis
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.search import runner
from tunas_search.space import schema
from tunas_search.space import serialization
from tunas_search.space import specs
from tunas_search.runtime.model_dir import ModelDirError
from tunas_search.space.schema import OneOf
from tests import killed_saves
from tests.e2e import tiny
from tests.files import rewrite_checkpoint_without
from tests.files import snapshot


def _copy(finished, tmp_path):
  target = str(tmp_path / 'copy')
  shutil.copytree(finished, target)
  return target


def test_second_run_on_a_live_model_dir_is_refused(tmp_path):
  model_dir = str(tmp_path / 'run')
  with model_dir_lib.exclusive(model_dir) as lock:
    lock.record_holder()
    with pytest.raises(ModelDirError, match=f'pid {os.getpid()} on host'):
      runner.run_search(tiny.tiny_config(model_dir), tiny.tiny_spec())
  assert os.listdir(model_dir) == [model_dir_lib.LOCK_FILENAME]


def test_damaged_checkpoint_is_refused_then_resumed_on_request(finished,
                                                               tmp_path):
  model_dir = _copy(finished, tmp_path)
  with open(os.path.join(model_dir, 'model.ckpt-4.data-00000-of-00001'),
            'r+b') as f:
    f.truncate(64)
  before = snapshot(model_dir)
  config = tiny.tiny_config(model_dir, max_steps=4)
  good = os.path.join(model_dir, 'model.ckpt-2')
  with pytest.raises(ModelDirError, match=f'--resume_from={good}'):
    runner.run_search(config, tiny.tiny_spec())
  with pytest.raises(analysis.AnalysisError, match='model.ckpt-4 cannot be '
                     'read'):
    analysis.analyze(model_dir)
  assert snapshot(model_dir) == before  # Nothing written or restarted.
  result = runner.run_search(config, tiny.tiny_spec(), resume_from=good)
  assert result.step == 4
  model_dir_lib.check(model_dir)


def test_garbage_state_file_never_restarts_from_step_zero(finished, tmp_path):
  model_dir = _copy(finished, tmp_path)
  with open(os.path.join(model_dir, 'checkpoint'), 'w') as f:
    f.write('garbage')
  before = snapshot(model_dir)
  with pytest.raises(ModelDirError, match='is not a checkpoint state file'):
    runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                      tiny.tiny_spec())
  assert snapshot(model_dir) == before


def test_checkpoint_of_another_graph_is_one_line_not_a_restart(finished,
                                                               tmp_path):
  # A whole checkpoint that lacks a variable of the search graph (another
  # version wrote it): restoring fails, and the run says so in one line
  # instead of TensorFlow's page, leaving the checkpoints as they were
  # (every start rewrites the lock's holder and TensorBoard's layout).
  model_dir = _copy(finished, tmp_path)
  for path in glob.glob(os.path.join(model_dir, 'model.ckpt-4.*')):
    os.remove(path)
  latest = os.path.join(model_dir, 'model.ckpt-2')
  tf.compat.v1.train.update_checkpoint_state(model_dir, latest)
  missing = 'blocks/0/layers/0/conv_k3/kernel'
  rewrite_checkpoint_without(latest, missing)
  rewritten = (model_dir_lib.LOCK_FILENAME,
               'events.out.tfevents.0000000000.custom_scalars_layout')

  def files():
    return {k: v for k, v in snapshot(model_dir).items()
            if k not in rewritten}
  before = files()
  with pytest.raises(ModelDirError) as error:
    runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                      tiny.tiny_spec())
  assert str(error.value) == (
      f'checkpoint {latest} has no variable {missing}, which this graph '
      'has: it was written by another tunas_search version or graph; resume '
      'it with that version, or start again with a new --model_dir')
  assert files() == before


def test_analysis_refuses_a_model_spec_that_does_not_match(finished,
                                                           tmp_path):
  model_dir = _copy(finished, tmp_path)
  spec = tiny.tiny_spec()
  # Same decisions but for one more stem width: the logits have 2 entries.
  stem = dataclasses.replace(spec.blocks[0], filters=OneOf([8, 16, 32],
                                                         schema.FILTERS))
  other = dataclasses.replace(spec, blocks=(stem,) + spec.blocks[1:])
  with open(os.path.join(model_dir, 'model_spec.json'), 'w') as f:
    f.write(serialization.dumps(other, indent=1))
  # The checkpoint's one three-choice decision against the spec's two.
  with pytest.raises(analysis.AnalysisError, match=(
      r'does not match: checkpoint .*choices_3.* with shape \[1, 3\], but '
      r'the spec has 2 decisions with 3 choices \(blocks/0/filters, ')):
    analysis.analyze(model_dir)


def test_analysis_refuses_a_model_spec_with_fewer_decisions(finished,
                                                           tmp_path):
  model_dir = _copy(finished, tmp_path)
  spec = tiny.tiny_spec()
  # The skippable residual layer fixed to a skip: three decisions fewer.
  body = dataclasses.replace(spec.blocks[1], layers=(
      spec.blocks[1].layers[0], specs.Residual(specs.Zero())))
  other = dataclasses.replace(spec, blocks=(spec.blocks[0], body,
                                            spec.blocks[2]))
  with open(os.path.join(model_dir, 'model_spec.json'), 'w') as f:
    f.write(serialization.dumps(other, indent=1))
  with pytest.raises(analysis.AnalysisError, match=r'does not match: '
                     r'checkpoint .*choices_2.* with shape \[6, 2\], but the '
                     'spec has 3 decisions with 2 choices'):
    analysis.analyze(model_dir)


def _graph_events(model_dir):
  count = 0
  for path in glob.glob(os.path.join(model_dir, 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      count += bool(event.graph_def or event.meta_graph_def)
  return count


def test_restarts_write_the_graph_once(finished, tmp_path, caplog):
  # `finished` is the first start; back to its checkpoints 0 and 2, the
  # restart meets the kill while the save of 4 wrote its index: the
  # data whole, the index empty, the temp dir, the state file naming 2.
  model_dir = _copy(finished, tmp_path)
  for path in glob.glob(os.path.join(model_dir, 'model.ckpt-4.*')):
    os.remove(path)
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, os.path.join(model_dir, 'model.ckpt-2'))
  killed_saves.kill_save(model_dir, 'empty_index', 'model.ckpt-2', 4)
  # A restart is a new process: no cached summary writers.
  tf.compat.v1.summary.FileWriterCache.clear()
  with caplog.at_level('INFO'):
    result = runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                               tiny.tiny_spec())
  assert result.step == 4
  removed = [r.getMessage() for r in caplog.records
             if 'saves that did not finish' in r.getMessage()]
  assert len(removed) == 1 and 'Removed 3 file(s)' in removed[0]
  assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-4')
  assert model_dir_lib.damage(os.path.join(model_dir, 'model.ckpt-4')) is None
  assert _graph_events(model_dir) == 1
  assert not glob.glob(os.path.join(model_dir, '*.meta'))
  assert not os.path.exists(os.path.join(model_dir, 'graph.pbtxt'))


@pytest.mark.parametrize('kind', killed_saves.KINDS)
def test_search_reruns_past_a_save_killed_at_any_instant(finished, tmp_path,
                                                         kind):
  # Checkpoints 0, 2, 4 recorded, the save of 6 killed: the rerun (already
  # at max_steps, so it trains nothing) removes the garbage and nothing else.
  model_dir = _copy(finished, tmp_path)
  garbage = killed_saves.kill_save(model_dir, kind, 'model.ckpt-4', 6)
  before = killed_saves.checkpoint_files(model_dir)
  result = runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                             tiny.tiny_spec())
  assert result.step == 4 and result.checkpoint.endswith('model.ckpt-4')
  after = killed_saves.checkpoint_files(model_dir)
  assert after == {k: v for k, v in before.items() if k not in garbage}
  assert not any(os.path.exists(os.path.join(model_dir, name))
                 for name in garbage)


def _train_eval_config(model_dir):
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  return test_train_eval.make_config(model_dir, mode='train', max_steps=2,
                                     save_checkpoints_steps=1)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A finished two-step train_eval run (checkpoints 1, 2); copy it to
  change it."""
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  model_dir = str(tmp_path_factory.mktemp('train_eval') / 'run')
  train_eval.run(_train_eval_config(model_dir), test_train_eval.SPEC)
  return model_dir


def test_train_eval_reruns_past_a_save_killed_at_any_instant(trained,
                                                             tmp_path):
  # Checkpoints 1, 2 recorded, the save of 3 killed at each instant: a rerun
  # at the last step removes the garbage and nothing else; then one trains on
  # past the kind.
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  model_dir = _copy(trained, tmp_path)
  config = _train_eval_config(model_dir)
  for kind in killed_saves.KINDS:
    garbage = killed_saves.kill_save(model_dir, kind, 'model.ckpt-2', 3)
    before = killed_saves.checkpoint_files(model_dir)
    assert train_eval.run(config, test_train_eval.SPEC) is None
    assert killed_saves.checkpoint_files(model_dir) == {
        k: v for k, v in before.items() if k not in garbage}
    for name in os.listdir(model_dir):  # state_file_write's whole one.
      if name.startswith('model.ckpt-3'):
        os.remove(os.path.join(model_dir, name))
  model_dir = str(tmp_path / 'longer')
  config = dataclasses.replace(config, model_dir=model_dir, max_steps=3)
  train_eval.run(config, test_train_eval.SPEC,
                 hooks=[tf.compat.v1.train.StopAtStepHook(last_step=2)])
  killed_saves.kill_save(model_dir, 'empty_index', 'model.ckpt-2', 3)
  train_eval.run(config, test_train_eval.SPEC)
  assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-3')
  assert model_dir_lib.damage(os.path.join(model_dir, 'model.ckpt-3')) is None


def test_train_eval_refuses_a_live_or_damaged_model_dir(trained, tmp_path):
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  live = str(tmp_path / 'live')
  with model_dir_lib.exclusive(live) as lock:
    lock.record_holder()
    with pytest.raises(ModelDirError, match=f'pid {os.getpid()} on host'):
      train_eval.run(_train_eval_config(live), test_train_eval.SPEC)
  assert os.listdir(live) == [model_dir_lib.LOCK_FILENAME]
  model_dir = _copy(trained, tmp_path)
  config = _train_eval_config(model_dir)
  with open(os.path.join(model_dir, 'model.ckpt-2.data-00000-of-00001'),
            'r+b') as f:
    f.truncate(16)
  before = snapshot(model_dir)
  with pytest.raises(ModelDirError, match='--resume_from=.*model.ckpt-1'):
    train_eval.run(config, test_train_eval.SPEC)
  assert snapshot(model_dir) == before
  assert train_eval.run(config, test_train_eval.SPEC,
                        resume_from='model.ckpt-1') is None
  assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-2')
  model_dir_lib.check(model_dir)


def test_train_eval_names_a_variable_its_checkpoint_lacks(trained, tmp_path):
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  model_dir = _copy(trained, tmp_path)
  config = _train_eval_config(model_dir)
  first = os.path.join(model_dir, 'model.ckpt-1')
  reader = tf.train.load_checkpoint(first)
  missing = sorted(n for n in reader.get_variable_to_shape_map()
                   if n.endswith('/kernel'))[0]
  rewrite_checkpoint_without(first, missing)
  with pytest.raises(ModelDirError) as error:
    train_eval.run(config, test_train_eval.SPEC, resume_from=first)
  assert str(error.value).startswith(
      f'checkpoint {first} has no variable {missing}, which this graph has')
  assert tf.train.latest_checkpoint(model_dir) == first
