"""Retargeting a finished tiny search: fixed weights, fresh controllers."""

import glob
import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bin import search as search_cli
from tests import files as files_lib
from tests.e2e import faults
from tests.e2e import tiny
from tunas_search import config as config_lib
from tunas_search import cost_models
from tunas_search.config import plan as plan_lib
from tunas_search.controller import policy as controller
from tunas_search.results import analysis
from tunas_search.results import front as front_lib
from tunas_search.runtime import checkpoints
from tunas_search.search import model_fn as search
from tunas_search.search import retarget
from tunas_search.search import runner
from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.standalone import warm_start

tf1 = tf.compat.v1
# Two MAdds targets of the tiny space with architectures within 1.2% of
# them (61,864 and 62,256; 398,984 and 399,768), far apart: a controller
# that follows its target ends at opposite ends of the space.
LOW, HIGH = 62000.0, 400000.0


def _checksums(directory):
  return {path: hashlib.sha256(data).hexdigest()
          for path, data in files_lib.snapshot(directory).items()}


@pytest.fixture(scope='module')
def source(tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp('source') / 'search')
  runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                    tiny.tiny_spec())
  return retarget.read_source(model_dir)


@pytest.fixture(scope='module')
def retargeted(source, tmp_path_factory):
  """A 60-step retarget to LOW and HIGH; the source's checksums before it."""
  before = _checksums(source.model_dir)
  model_dir = str(tmp_path_factory.mktemp('retarget') / 'run')
  # The search's validation batch of 16 images: at the default one batch
  # (4 images here) rewards are too noisy for 60 steps to reach LOW.
  config = retarget.make_config(source, model_dir, [LOW, HIGH], max_steps=60,
                                save_checkpoints_steps=20,
                                tpu_iterations_per_loop=20,
                                rl_batch_size_multiplier=4.0)
  result = retarget.run_retarget(config, source, [LOW, HIGH])
  return config, result, before


def _cost(config, spec, indices):
  return cost_models.get('madds').cost(
      spec, architecture.canonicalize(spec, indices),
      cost_models.context_for(config))


def test_source_dir_is_unchanged(source, retargeted):
  _, _, before = retargeted
  assert _checksums(source.model_dir) == before


def test_shared_weights_are_the_sources_and_stay_fixed(source, retargeted):
  config, _, _ = retargeted
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(
      config.model_dir))
  with tf.Graph().as_default():
    # The network's variables, as the retarget's validation pass makes them.
    masks = [tf.ones([d.num_choices]) / d.num_choices
             for d in schema.decisions(source.spec)]
    search.validation_logits(
        config, plan_lib.resolve(config), schema.with_masks(source.spec, masks),
        tf.zeros([2, 28, 28, 1]))
    variables = tf1.global_variables()
    expected = warm_start.SearchWeights.open(
        source.model_dir, source.spec, 10, 1).assignments(variables)
  assert len(expected) > 10
  for var, value in expected:
    # Restored, then never stepped in 60 steps: bit for bit.
    np.testing.assert_array_equal(reader.get_tensor(var.op.name), value,
                                  err_msg=var.op.name)


def test_only_the_controllers_are_trainable(source, tmp_path):
  config = retarget.make_config(source, str(tmp_path / 'r'), [LOW, HIGH])
  model_fn = retarget.make_model_fn(config, plan_lib.resolve(config),
                                    source.spec, source, [LOW, HIGH])
  with tf.Graph().as_default():
    features = {'train_images': tf.zeros([4, 28, 28, 1]),
                'validation_images': tf.zeros([16, 28, 28, 1])}
    labels = {'train_labels': tf.zeros([4], tf.int32),
              'validation_labels': tf.zeros([16], tf.int32)}
    model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {})
    names = sorted(v.op.name for v in tf1.trainable_variables())
  # The tiny space has decisions of 2 and 3 choices: one logits group each,
  # per controller.
  assert names == ['retarget_1/rlcontroller/logits/choices_2',
                   'retarget_1/rlcontroller/logits/choices_3',
                   'rlcontroller/logits/choices_2',
                   'rlcontroller/logits/choices_3']


def test_each_controller_reaches_its_target(source, retargeted):
  config, result, _ = retargeted
  decisions = schema.decisions(source.spec)
  for k, target in enumerate([LOW, HIGH]):
    logits = retarget.final_logits(config.model_dir, decisions, k)
    cost = _cost(config, source.spec, controller.argmax_indices(logits))
    # Uniform logits' argmax (every first choice) costs 46,184 MAdds; the
    # learnt ones land within 5% of each target.
    assert abs(cost / target - 1) < 0.05, (target, cost)
  saved = json.load(open(os.path.join(config.model_dir, 'search_result.json')))
  assert saved['final_architecture']['in_window']
  assert saved['architecture'] == result.architecture
  assert result.step == 60


def test_writes_what_a_search_writes(retargeted):
  config, _, _ = retargeted
  names = set(os.listdir(config.model_dir))
  assert {'config.json', 'model_spec.json', 'step_plan.json',
          'search_result.json', 'retarget.json', 'checkpoint'} <= names
  assert any(n.startswith('events.out.tfevents') for n in names)
  scalars = analysis.read_scalars(config.model_dir, prefixes=('rl', 'retarget'))
  for tag in ('rlcontroller/reward', 'rlcontroller/estimated_cost',
              'retarget_1/rlcontroller/reward',
              'retarget_1/rlcontroller/estimated_cost'):
    assert tag in scalars, sorted(scalars)[:20]
  # Read back as a search, at the first target.
  loaded, _ = analysis.load_search(config.model_dir)
  assert loaded.rl_cost_model_target == LOW
  assert loaded.rl_delay_steps_fraction == 0.0


def test_front_holds_every_target_the_source_and_the_cloud(
    source, retargeted):
  config, _, _ = retargeted
  front = front_lib.build(config.model_dir, config, source, [LOW, HIGH],
                          num_random=4, num_batches=1)
  paths = front_lib.write(front, config.model_dir)
  assert [p.target for p in front.of_kind(front_lib.TARGET)] == [LOW, HIGH]
  (mine,) = front.of_kind(front_lib.SOURCE)
  assert mine.target == source.config.rl_cost_model_target
  assert len(front.of_kind(front_lib.RANDOM)) == 4
  for p in front.points:
    assert p.cost == _cost(config, source.spec,
                           architecture.parse_indices(p.architecture))
    # One batch of 16 images (the source's validation batch).
    assert 0 <= p.one_shot_accuracy <= 1
    assert p.one_shot_accuracy * 16 == pytest.approx(
        round(p.one_shot_accuracy * 16))
  saved = json.load(open(os.path.join(config.model_dir, 'front.json')))
  assert saved == json.loads(json.dumps(front.to_dict()))
  rows = open(os.path.join(config.model_dir, 'front.csv')).read().splitlines()
  assert len(rows) == 1 + len(front.points)
  assert any(p.endswith('front.png') for p in paths)


def test_resumes_after_a_kill(source, tmp_path):
  model_dir = str(tmp_path / 'killed')
  config = retarget.make_config(source, model_dir, [LOW], max_steps=6,
                                save_checkpoints_steps=2,
                                tpu_iterations_per_loop=2)
  with pytest.raises(KeyboardInterrupt):
    retarget.run_retarget(config, source, [LOW], hooks=[faults.StopAt(3)])
  assert analysis.checkpoint_steps(model_dir)
  assert not os.path.exists(os.path.join(model_dir, 'search_result.json'))
  result = retarget.run_retarget(config, source, [LOW])
  assert result.step == 6
  # Another target list is another run: refused in one line.
  with pytest.raises(config_lib.ConfigError, match='holds a retarget of'):
    retarget.run_retarget(config, source, [LOW, HIGH])


def _unfinished(source, directory, checkpoint_step, result):
  """A copy of the finished 4-step source search with its checkpoints up to
  `checkpoint_step` (as a kill after that save leaves them), its
  search_result.json kept if `result`."""
  shutil.copytree(source.model_dir, directory)
  for step in (4, 2):
    if step > checkpoint_step:
      for path in glob.glob(os.path.join(directory, f'model.ckpt-{step}.*')):
        os.remove(path)
  kept = [os.path.join(directory, f'model.ckpt-{s}')
          for s in (0, 2, 4) if s <= checkpoint_step]
  checkpoints.write_state(directory, kept[-1], kept)
  if not result:
    os.remove(os.path.join(directory, retarget.RESULT_FILENAME))
  return directory


@pytest.mark.parametrize('checkpoint_step, result, found', [
    (2, False, 'checkpoint at step 2 of 4, search_result.json missing'),
    (4, False, 'checkpoint at step 4 of 4, search_result.json missing'),
    (2, True, 'checkpoint at step 2 of 4, search_result.json present'),
])
def test_unfinished_source_is_one_line(source, tmp_path, checkpoint_step,
                                       result, found):
  # The first: what a search killed after its save of step 2 leaves.
  unfinished = _unfinished(source, str(tmp_path / 'unfinished'),
                           checkpoint_step, result)
  with pytest.raises(config_lib.ConfigError, match='unfinished search') as e:
    retarget.read_source(unfinished)
  assert f'({found})' in str(e.value)
  assert '\n' not in str(e.value)


def test_missing_source_is_one_line(tmp_path):
  with pytest.raises(config_lib.ConfigError, match='does not exist'):
    retarget.read_source(str(tmp_path / 'nothing'))


def _cli(*args):
  flag_values = flags.FlagValues()
  search_cli.define_flags(flag_values)
  flag_values(['search', *args])
  return flag_values


@pytest.mark.parametrize('args, message', [
    (('--rl_cost_model_targets=60,abc',), "bad target 'abc'"),
    (('--rl_cost_model_targets=60,60',), 'is repeated'),
    ((), 'needs --rl_cost_model_target'),
    (('--rl_cost_model_target=60', '--train_batch_size=8'),
     '--train_batch_size cannot change in a retarget'),
    (('--rl_cost_model_target=60', '--cost_model=nope'), 'unknown cost'),
    (('--rl_cost_model_target=60', '--resume_from=model.ckpt-2'),
     '--resume_from is for a search'),
])
def test_bad_flags_are_one_line_and_write_nothing(source, tmp_path, args,
                                                  message):
  out = str(tmp_path / 'out')
  with pytest.raises((search_cli.cli.UsageError, flags.Error)) as e:
    search_cli.main(['search'], _cli(f'--retarget_from={source.model_dir}',
                                     f'--model_dir={out}', *args))
  assert message in str(e.value) and '\n' not in str(e.value)
  assert not os.path.exists(out)


def test_targets_without_a_source_are_refused(tmp_path):
  with pytest.raises(search_cli.cli.UsageError, match='needs --retarget_from'):
    search_cli.main(['search'], _cli(f'--model_dir={tmp_path}/s',
                                     '--rl_cost_model_targets=60,84'))


def test_a_search_dir_is_not_retargeted_into(source, tmp_path):
  # Another finished search's dir: a copy of the source's (the source's
  # own dir is refused before, as the source).
  other = str(tmp_path / 'search')
  shutil.copytree(source.model_dir, other)
  config = retarget.make_config(source, other, [LOW])
  with pytest.raises(config_lib.ConfigError, match='holds a search'):
    retarget.run_retarget(config, source, [LOW])


@pytest.fixture(scope='module')
def recorded(source, tmp_path_factory):
  """10 steps to [LOW, HIGH] and to [HIGH] alone, every step recorded."""
  runs = {}
  for name, targets in (('both', [LOW, HIGH]), ('high', [HIGH])):
    model_dir = str(tmp_path_factory.mktemp('recorded') / name)
    config = retarget.make_config(source, model_dir, targets, max_steps=10,
                                  save_checkpoints_steps=10,
                                  tpu_iterations_per_loop=10)
    recorder = retarget.StepRecorder()
    retarget.run_retarget(config, source, targets, hooks=[recorder])
    runs[name] = (config, recorder)
  return runs


def test_a_target_beside_others_learns_as_it_would_alone(source, recorded):
  both, high = recorded['both'][1], recorded['high'][1]
  assert len(both.accuracies) == len(high.accuracies) == 10
  # The controller of HIGH samples the same architectures with or without
  # LOW beside it (the same seed), scores them on the same batches and ends
  # with the same logits.
  # Accuracies are multiples of 1/16 (16 validation images): equal exactly.
  assert [a[1] for a in both.accuracies] == [a[0] for a in high.accuracies]
  decisions = schema.decisions(source.spec)
  for a, b in zip(retarget.final_logits(recorded['both'][0].model_dir,
                                        decisions, 1),
                  retarget.final_logits(recorded['high'][0].model_dir,
                                        decisions, 0)):
    np.testing.assert_array_equal(a, b)


def test_uniform_controllers_sample_one_architecture(recorded):
  both = recorded['both'][1]
  # Step 0: both controllers are uniform and share the seed (common random
  # numbers), so they sample one architecture and score it alike.
  assert both.accuracies[0][0] == both.accuracies[0][1]


def test_a_retarget_validates_on_one_training_batch_unless_told(source,
                                                                tmp_path):
  # By default one training batch: a step is its validation pass.
  f = _cli(f'--retarget_from={source.model_dir}',
           f'--model_dir={tmp_path}/default', '--rl_cost_model_target=60')
  config, _, _ = search_cli.retargeting.build(f, search_cli.CONFIG_FLAGS.names)
  assert source.config.rl_batch_size_multiplier == 4
  assert config.rl_batch_size_multiplier == 1
  assert config.validation_batch_size == config.train_batch_size
  # The search's own batch, for its reward noise, on request.
  f = _cli(f'--retarget_from={source.model_dir}',
           f'--model_dir={tmp_path}/same', '--rl_cost_model_target=60',
           '--rl_batch_size_multiplier=4')
  config, _, _ = search_cli.retargeting.build(f, search_cli.CONFIG_FLAGS.names)
  assert config.validation_batch_size == source.config.validation_batch_size


def test_a_multi_target_dir_is_evaluated_at_its_first_target_and_says_so(
    source, retargeted, caplog):
  # pylint: disable=g-import-not-at-top
  from tunas_search.evaluation import worklist
  config, _, _ = retargeted
  assert retarget.targets_of(config.model_dir) == [LOW, HIGH]
  assert retarget.targets_of(source.model_dir) == []
  with caplog.at_level('WARNING'):
    search_at = worklist.load_search(config.model_dir)
    worklist.load_search(source.model_dir)
  assert search_at.config.rl_cost_model_target == LOW
  (warning,) = [r.getMessage() for r in caplog.records
                if r.levelname == 'WARNING']
  assert config.model_dir in warning
  assert f'retarget to 2 targets ({LOW:g}, {HIGH:g})' in warning
  assert f'evaluated at its first, {LOW:g}' in warning
