"""End-to-end CPU searches through the real model_fn and TPUEstimator."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from tests.e2e import faults
from tests.e2e import tiny
from tunas_search.controller import policy as controller
from tunas_search.search import runner
from tunas_search.space import schema
from tunas_search.config import plan as plan_lib
from tunas_search.supernet import deferred

tf1 = tf.compat.v1

# Every scalar the issue documents for a search with a cost model.
DOCUMENTED_SCALARS = [
    'model/loss', 'model/empirical_loss', 'model/regularization_loss',
    'model/learning_rate', 'rlcontroller/empirical_loss',
    'rlcontroller/entropy_loss', 'rlcontroller/entropy',
    'rlcontroller/validation_accuracy', 'rlcontroller/reward',
    'rlcontroller/step_baseline', 'rlcontroller/baseline',
    'rlcontroller/advantage', 'rlcontroller/log_prob',
    'rlcontroller/learning_rate', 'rlcontroller/increase_ops_prob',
    'rlcontroller/increase_filters_prob', 'rlcontroller/estimated_cost',
    'rlcontroller/cost_ratio', 'rlcontroller/cost_adjustment']


def _events(model_dir):
  acc = event_accumulator.EventAccumulator(
      model_dir, size_guidance={event_accumulator.TENSORS: 0})
  acc.Reload()
  return acc


@pytest.fixture(scope='module')
def finished_search(tmp_path_factory):
  config = tiny.tiny_config(tmp_path_factory.mktemp('search'))
  result = runner.run_search(config, tiny.tiny_spec())
  return config, result


def test_writes_config_spec_and_result(finished_search):
  config, result = finished_search
  for name in ('config.json', 'model_spec.json', 'search_result.json'):
    assert os.path.exists(os.path.join(config.model_dir, name))
  assert result.step == 6
  saved = json.loads(open(os.path.join(config.model_dir,
                                       'search_result.json')).read())
  assert saved['architecture'] == result.architecture
  # config.json holds the config as given; step_plan.json what 'auto'
  # resolved to (one replica on a CPU), which a resume keeps.
  assert config.unused_weight_steps == 'auto'
  stored = json.loads(open(os.path.join(config.model_dir,
                                        'config.json')).read())
  assert stored['unused_weight_steps'] == 'auto'
  plan = plan_lib.previous(config.model_dir)
  assert plan == plan_lib.resolve(config, runner.probe_environment())
  assert plan.shared_update == 'deferred' and plan.width_form == 'sampled'


def test_events_hold_every_scalar_and_logit(finished_search):
  config, _ = finished_search
  tags = set(_events(config.model_dir).Tags()['tensors'])
  missing = [t for t in DOCUMENTED_SCALARS if t not in tags]
  assert not missing
  decisions = schema.decisions(tiny.tiny_spec())
  for d in decisions:
    for j in range(d.num_choices):
      assert f'rlpathlogits/{d.path}/{j}' in tags
      assert f'rltaglogits/{d.tag_name}/{j}' in tags
  logit_tags = [t for t in tags if t.startswith('rlpathlogits/')]
  assert len(logit_tags) == sum(d.num_choices for d in decisions)


def test_summaries_are_written_every_iterations_per_loop(finished_search):
  config, _ = finished_search
  steps = [e.step for e in _events(config.model_dir).Tensors('model/loss')]
  # Logged under the step that produced them (= the checkpoint after it),
  # every loop of 2 steps and at the last step, 6.
  assert steps == [2, 4, 6]


def test_result_is_the_argmax_of_the_checkpointed_logits(finished_search):
  config, result = finished_search
  decisions = schema.decisions(tiny.tiny_spec())
  logits = controller.read_logit_values(config.model_dir, decisions)
  argmax = controller.argmax_indices(logits)
  # The result is canonical: indices under a skipped layer are 0.
  for d, got, want in zip(decisions, result.indices, argmax):
    if all(argmax[p] == c for p, c in d.parents):
      assert got == want
  # The controller learned something: logits moved away from zero.
  assert max(np.abs(l).max() for l in logits) > 0


class _ReadOnStart(tf1.train.SessionRunHook):
  """Records controller and baseline variables right after a restore."""

  def __init__(self):
    self.values = None

  def after_create_session(self, session, coord):
    names = [v for v in tf1.global_variables()
             if v.name.startswith('rlcontroller/') or
             v.name.startswith('global_step')]
    self.values = {v.name.split(':')[0]: session.run(v) for v in names}


def test_interrupted_search_resumes_with_its_state(tmp_path):
  config = tiny.tiny_config(tmp_path, max_steps=8)
  with pytest.raises(KeyboardInterrupt):
    runner.run_search(config, tiny.tiny_spec(), hooks=[faults.StopAt(4)])
  reader = tf.train.load_checkpoint(str(tmp_path))
  assert reader.get_tensor('global_step') == 4
  saved = {name: reader.get_tensor(name)
           for name in reader.get_variable_to_shape_map()
           if name.startswith('rlcontroller/') and 'Adam' not in name}
  assert 'rlcontroller/baseline/ema' in saved
  assert saved['rlcontroller/baseline/count'] == 4

  probe = _ReadOnStart()
  result = runner.run_search(config, tiny.tiny_spec(), hooks=[probe])
  assert probe.values['global_step'] == 4
  for name, value in saved.items():
    np.testing.assert_array_equal(probe.values[name], value, err_msg=name)
  assert result.step == 8
  final = tf.train.load_checkpoint(str(tmp_path))
  assert final.get_tensor('rlcontroller/baseline/count') == 8


def test_auto_resumes_an_every_step_run_with_every_step(tmp_path):
  # A run started with TuNAS's update (or before 'auto' was the default):
  # its checkpoints hold no deferred state, and rerunning it with 'auto'
  # must not start deferring halfway.
  first = tiny.tiny_config(tmp_path, max_steps=6,
                           unused_weight_steps='every_step')
  with pytest.raises(KeyboardInterrupt):
    runner.run_search(first, tiny.tiny_spec(), hooks=[faults.StopAt(3)])
  # As versions before the step plan left a model dir: the resolved value in
  # config.json, no step_plan.json.
  (tmp_path / plan_lib.PLAN_FILENAME).unlink()
  result = runner.run_search(tiny.tiny_config(tmp_path, max_steps=6),
                             tiny.tiny_spec())
  assert result.step == 6
  stored = json.loads((tmp_path / 'config.json').read_text())
  assert stored['unused_weight_steps'] == 'every_step'
  assert plan_lib.previous(str(tmp_path)).shared_update == 'every_step'
  names = [n for n, _ in tf.train.list_variables(str(tmp_path))]
  assert 'global_step' in names
  assert not [n for n in names if n.startswith(deferred.SCOPE)]


def _checkpoint_steps(model_dir):
  state = tf.train.get_checkpoint_state(model_dir)
  return [int(p.rsplit('-', 1)[1]) for p in state.all_model_checkpoint_paths]


def _assert_all_finite(checkpoint):
  for name, _ in tf.train.list_variables(checkpoint):
    value = tf.train.load_checkpoint(checkpoint).get_tensor(name)
    if np.issubdtype(np.asarray(value).dtype, np.floating):
      assert np.all(np.isfinite(value)), f'{checkpoint}: {name}'


def _assert_every_checkpoint_on_disk_is_finite(model_dir):
  indexes = tf.io.gfile.glob(os.path.join(model_dir, 'model.ckpt-*.index'))
  assert indexes
  for index in indexes:
    _assert_all_finite(index[:-len('.index')])


@pytest.mark.parametrize('value', [float('inf'), float('nan')],
                         ids=['inf', 'nan'])
def test_non_finite_training_batch_stops_the_run(tmp_path, value):
  config = tiny.tiny_config(tmp_path, max_steps=8)
  # Element 5 feeds the sixth step, at which a checkpoint is due.
  poisoned = faults.PoisonedInput(runner.search_input_fn(config),
                                  'train_images', index=5, value=value)
  with pytest.raises(runner.NonFiniteLossError) as error:
    runner.run_search(config, tiny.tiny_spec(), input_fn=poisoned)
  message = str(error.value)
  assert '\n' not in message
  assert message.startswith('the loss became NaN or infinite at step 6;')
  # The checkpoint of the failed step is written before the run stops; the
  # step's zeroed gradients keep it finite.
  assert _checkpoint_steps(str(tmp_path)) == [0, 2, 4, 6]
  _assert_every_checkpoint_on_disk_is_finite(str(tmp_path))
  newest = tf.train.latest_checkpoint(str(tmp_path))
  assert f'newest all-finite checkpoint: {newest}; rerun' in message


def test_infinite_controller_loss_stops_the_run(tmp_path):
  config = tiny.tiny_config(tmp_path, max_steps=8)
  # A baseline this large is finite, but its debiased estimate at the fourth
  # step is +inf, so the controller loss is exactly -inf (not NaN) while the
  # shared-weight loss stays finite.
  blow_up = faults.SetVariableAt('rlcontroller/baseline/ema', step=3,
                                 value=3e38)
  with pytest.raises(runner.NonFiniteLossError,
                     match='NaN or infinite at step 4;') as error:
    runner.run_search(config, tiny.tiny_spec(), hooks=[blow_up])
  assert _checkpoint_steps(str(tmp_path)) == [0, 2, 4]
  _assert_every_checkpoint_on_disk_is_finite(str(tmp_path))
  assert f'checkpoint: {tf.train.latest_checkpoint(str(tmp_path))};' in str(
      error.value)


def test_run_stopped_with_a_non_finite_checkpoint_resumes_before_it(tmp_path):
  config = tiny.tiny_config(tmp_path, max_steps=8)
  # NaN in the baseline before the sixth step; the checkpoint of that step
  # is written before the run stops, and holds the NaN.
  blow_up = faults.SetVariableAt('rlcontroller/baseline/ema', step=5,
                                 value=float('nan'))
  with pytest.raises(runner.NonFiniteLossError) as error:
    runner.run_search(config, tiny.tiny_spec(), hooks=[blow_up])
  good = os.path.join(str(tmp_path), 'model.ckpt-4')
  assert str(error.value) == (
      f'the loss became NaN or infinite at step 6; newest all-finite '
      f'checkpoint: {good} (newer checkpoints hold NaN or inf; a rerun skips '
      'them); rerun the same command with a lower --model_learning_rate (or '
      '--rl_learning_rate) to resume from it')
  assert tf.train.latest_checkpoint(str(tmp_path)) == good
  _assert_all_finite(good)

  result = runner.run_search(config, tiny.tiny_spec())
  assert result.step == 8
  _assert_every_checkpoint_on_disk_is_finite(str(tmp_path))


def test_bfloat16_search_runs_on_cpu(tmp_path):
  config = tiny.tiny_config(tmp_path, max_steps=2, use_bfloat16=True)
  result = runner.run_search(config, tiny.tiny_spec())
  assert result.step == 2
  assert config.weight_decay == 3e-5  # docs/method.md section 2, bfloat16.


def test_search_without_cost_model_rewards_plain_accuracy(tmp_path):
  config = tiny.tiny_config(tmp_path, max_steps=2, cost_model='none',
                            rl_cost_model_target=None,
                            tpu_iterations_per_loop=1)
  runner.run_search(config, tiny.tiny_spec())
  acc = _events(str(tmp_path))
  tags = set(acc.Tags()['tensors'])
  assert 'rlcontroller/estimated_cost' not in tags
  for reward, accuracy in zip(acc.Tensors('rlcontroller/reward'),
                              acc.Tensors('rlcontroller/validation_accuracy')):
    assert tf.make_ndarray(reward.tensor_proto) == tf.make_ndarray(
        accuracy.tensor_proto)
