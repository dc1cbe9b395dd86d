"""After the search, end to end on CPU: analyse, train, evaluate, export.

A short search of the tiny spec (tests/e2e/tiny.py), its final architecture
trained stand-alone and fine-tuned from the inherited shared weights, then
exported to a SavedModel and a float TFLite model that agree.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bin import describe_arch
from bin import train_eval as train_eval_cli
from tests.results import test_analysis
from tests.e2e import tiny
from tunas_search.results import analysis
from tunas_search.space import architecture
from tunas_search.controller import policy as controller
from tunas_search.runtime import tflite
from tunas_search.standalone import export
from tunas_search.search import runner
from tunas_search.space import schema
from tunas_search.results import selection
from tunas_search.standalone import train_eval
from tunas_search.standalone import TrainEvalConfig

tf1 = tf.compat.v1
SEARCH_STEPS = 60
BATCH = 32


@pytest.fixture(scope='module')
def search_dir(tmp_path_factory):
  """A tiny search long enough for the shared weights to learn a little.

  At TuNAS's learning rate the tiny supernet barely moves in 60 steps; 4.0
  per 256 images (0.5 here) takes its training loss from ~2.30 to ~2.0,
  enough to tell inherited weights from fresh ones.
  """
  config = tiny.tiny_config(
      tmp_path_factory.mktemp('search'), max_steps=SEARCH_STEPS,
      train_batch_size=BATCH, rl_batch_size_multiplier=1.0,
      model_learning_rate=4.0, model_warmup_steps_fraction=0.0,
      increase_ops_warmup_steps_fraction=0.0,
      increase_filters_warmup_steps_fraction=0.0,
      tpu_iterations_per_loop=SEARCH_STEPS,
      save_checkpoints_steps=SEARCH_STEPS)
  runner.run_search(config, tiny.tiny_spec())
  return config.model_dir


def train_config(model_dir, indices, **overrides):
  values = dict(
      search_space='tiny', indices=indices, model_dir=str(model_dir),
      num_classes=10, num_train_examples=10000, image_size=28,
      input_channels=1, train_batch_size=BATCH, eval_batch_size=500,
      max_steps=4, tpu_iterations_per_loop=2, save_checkpoints_steps=4,
      seed=7)
  values.update(overrides)
  return TrainEvalConfig(**values)


class LossRecorder(tf1.train.SessionRunHook):
  """Records the empirical (cross-entropy) training loss of every step."""

  def __init__(self):
    self.losses = []

  def begin(self):
    self._loss = tf1.losses.get_losses()[0]

  def before_run(self, run_context):
    return tf1.train.SessionRunArgs(self._loss)

  def after_run(self, run_context, run_values):
    self.losses.append(float(run_values.results))


def test_analysis_is_the_argmax_of_the_checkpointed_logits(search_dir):
  result = json.loads(analysis.analyze(search_dir).to_json())
  spec = tiny.tiny_spec()
  logits = controller.read_logit_values(search_dir, schema.decisions(spec))
  assert result['step'] == SEARCH_STEPS
  assert result['indices'] == architecture.canonicalize(
      spec, controller.argmax_indices(logits))
  # The controller moved: some logits are no longer zero.
  assert max(np.abs(v).max() for v in logits) > 0


def test_analysis_cost_equals_describe_arch(tmp_path):
  """Same architecture string -> same costs in analyze and describe_arch."""
  space = test_analysis.SPACE
  spec = describe_arch.search_spaces.get(space).spec()
  decisions = schema.decisions(spec)
  test_analysis.write_search_files(str(tmp_path), spec)
  test_analysis.write_checkpoint(str(tmp_path), decisions,
                                 test_analysis.random_logits(decisions, 5), 30)
  result = analysis.analyze(str(tmp_path))
  described = describe_arch.describe(space, result.architecture,
                                     num_classes=10, image_size=32,
                                     input_channels=1)
  assert described['architecture'] == result.architecture
  assert described['indices'] == result.indices
  assert result.costs  # pixel1_latency, madds and params.
  for name, value in result.costs.items():
    # The same float64 cost-model code in both tools: equal up to float64
    # summation order at most.
    assert described[f'cost/{name}'] == pytest.approx(value, rel=1e-12)


def test_train_evaluate_and_export(search_dir, tmp_path):
  search_config, spec, indices = train_eval.architecture_from_search(
      search_dir)
  assert indices == analysis.analyze(search_dir).architecture
  config = train_config(tmp_path / 'final', indices,
                        search_space=search_config.search_space,
                        steps_per_eval=2)
  result = train_eval.run(config, spec)
  assert result.global_step == 4
  assert result.num_examples == 2000  # Every embedded test image.
  assert 0.0 <= result.top_1_accuracy <= result.top_5_accuracy <= 1.0
  assert result.loss > 0
  saved = json.loads(open(train_eval.results_path(config.model_dir,
                                                  'test')).read())
  assert saved['architecture'] == indices
  assert saved['global_step'] == 4
  assert saved['top_1_accuracy'] == result.top_1_accuracy
  # Evaluated after each chunk of 2 steps.
  assert sorted(os.listdir(os.path.join(config.model_dir, 'eval_test')))

  exported = export.export_run(config.model_dir)
  assert exported.global_step == 4
  assert exported.input_shape == [-1, 28, 28, 1]
  images = np.random.default_rng(0).standard_normal(
      [8, 28, 28, 1]).astype(np.float32)
  served = tf.saved_model.load(exported.saved_model_dir).signatures[
      tflite.SIGNATURE_KEY](images=tf.constant(images))
  with open(exported.tflite_path, 'rb') as f:
    lite = tflite.run_tflite(f.read(), images)
  for key in ('logits', 'probabilities'):
    assert lite[key].shape == (8, 10)
    # TFLite's kernels fold BN and accumulate in another order than TF's:
    # float32 differences on O(1) values (tests/standalone/test_export.py).
    np.testing.assert_allclose(lite[key], served[key].numpy(), atol=1e-4)
  # A float32 sum of 10 probabilities: a few ulps of 1.
  np.testing.assert_allclose(lite['probabilities'].sum(-1), 1.0, atol=1e-5)


def test_fine_tune_starts_lower_than_from_scratch(search_dir, tmp_path):
  _, spec, indices = train_eval.architecture_from_search(search_dir)
  losses = {}
  for name, init in (('scratch', None), ('inherited', search_dir)):
    recorder = LossRecorder()
    config = train_config(tmp_path / name, indices, mode='train',
                          max_steps=3, init_from_search=init)
    assert train_eval.run(config, spec, hooks=[recorder]) is None
    losses[name] = recorder.losses
  assert len(losses['scratch']) == len(losses['inherited']) == 3
  # A fresh classifier (N(0, 0.01)) predicts ~uniformly: loss ~ log(10).
  # Its logits are ~0.01 x the O(1) features, which moves the loss by a few
  # hundredths at most, hence 0.05; the same margin separates the two
  # runs' mean losses below (a learning claim, not a rounding tolerance).
  assert losses['scratch'][0] == pytest.approx(np.log(10), abs=0.05)
  assert np.mean(losses['inherited']) < np.mean(losses['scratch']) - 0.05, (
      losses)
  # The step-0 checkpoint holds the prefix slices of the search's weights.
  search = tf.train.load_checkpoint(search_dir)
  start = tf.train.load_checkpoint(str(tmp_path / 'inherited' /
                                       'model.ckpt-0'))
  names = [n for n in start.get_variable_to_shape_map()
           if n.startswith(('blocks/', 'classifier/')) and
           'RMSProp' not in n and 'moving_' not in n]
  assert 'classifier/kernel' in names and len(names) >= 15
  for name in names:
    value = start.get_tensor(name)
    np.testing.assert_array_equal(value, search.get_tensor(name)[tuple(
        slice(0, n) for n in value.shape)], err_msg=name)


def test_cli_takes_the_final_architecture_of_a_search(search_dir, tmp_path):
  def build(*extra):
    flag_values = flags.FlagValues()
    train_eval_cli.define_flags(flag_values)
    flag_values(['train_eval', f'--search_model_dir={search_dir}',
                 f'--init_from_search={search_dir}', f'--model_dir={tmp_path}',
                 '--train_batch_size=32', *extra])
    return train_eval_cli.build_config(flag_values)

  config, spec = build()
  result = analysis.analyze(search_dir)
  search_config, _ = analysis.load_search(search_dir)
  # By default the rule `auto` (tunas_search/results/selection.py); TuNAS's argmax
  # on request.
  assert config.indices == selection.for_search(
      search_config, spec, result).choose('auto').architecture
  assert build('--final_architecture=argmax')[0].indices == (
      result.architecture)
  assert config.search_space == 'tiny'
  # Dataset and resolution default to the search's.
  assert (config.dataset, config.image_size, config.num_classes) == (
      'embedded', 28, 10)
  assert len(schema.decisions(spec)) == 7


def test_freeze_backbone_trains_only_the_classifier(search_dir, tmp_path):
  _, spec, indices = train_eval.architecture_from_search(search_dir)
  config = train_config(tmp_path, indices, mode='train', max_steps=2,
                        init_from_search=search_dir, freeze_backbone=True)
  train_eval.run(config, spec)
  start = tf.train.load_checkpoint(str(tmp_path / 'model.ckpt-0'))
  end = tf.train.load_checkpoint(str(tmp_path / 'model.ckpt-2'))
  kernel = 'blocks/0/layers/0/conv_k3/kernel'
  np.testing.assert_array_equal(start.get_tensor(kernel),
                                end.get_tensor(kernel))
  assert not np.array_equal(start.get_tensor('classifier/kernel'),
                            end.get_tensor('classifier/kernel'))
  # BN moving averages are re-estimated for the inherited features.
  stat = 'blocks/0/layers/0/bn_k3/moving_mean'
  assert not np.array_equal(start.get_tensor(stat), end.get_tensor(stat))
