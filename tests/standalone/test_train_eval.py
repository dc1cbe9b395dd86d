"""Tests of stand-alone train/eval: config, model dir checks, warm start, CLI."""

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bin import cli
from bin import train_eval as train_eval_cli
from tests.e2e import tiny
from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search.space import serialization
from tunas_search.standalone import train_eval
from tunas_search.config import ConfigError
from tunas_search.standalone import model_fn
from tunas_search.standalone import warm_start
from tunas_search.config.standalone import TrainEvalConfig
from tunas_search.supernet import deferred

tf1 = tf.compat.v1
SPEC = tiny.tiny_spec()
LARGEST = architecture.format_indices(architecture.largest(SPEC))
# 8-wide stem and block, k5 (as LARGEST) e1, the residual layer skipped.
SMALLEST = '0:1:0:1:0:1:0'


def make_config(model_dir='/tmp/unused', **overrides):
  values = dict(search_space='tiny', indices=LARGEST,
                model_dir=str(model_dir), num_classes=10,
                num_train_examples=10000, image_size=28, input_channels=1,
                train_batch_size=32, max_steps=4, seed=1)
  values.update(overrides)
  return TrainEvalConfig(**values)


# Config ---------------------------------------------------------------------

def test_recipe_defaults_and_derived_values():
  c = make_config(max_steps=None, train_batch_size=4096,
                  num_train_examples=1_231_121)
  # docs/method.md section 6: 0.165 x 4096/256, 2.5% warm-up, 90 epochs. Decimal
  # products in float64 (0.165 * 16 is not exactly 2.64): default rel=1e-6.
  assert c.scaled_model_learning_rate == pytest.approx(2.64)
  assert c.total_steps == 27_050  # floor(90 * 1231121 / 4096), as released
  assert c.warmup_steps == 676
  assert c.weight_decay == 4e-5
  assert dataclasses.replace(c, use_bfloat16=True).weight_decay == 3e-5
  assert c.effective_dropout_rate == 0.0  # Below 150 epochs (docs/method.md section 7).
  assert dataclasses.replace(c, epochs=360).effective_dropout_rate == 0.2
  assert dataclasses.replace(c, dropout_rate=0.3).effective_dropout_rate == 0.3
  # max_steps counts as epochs too: 4 x 32 images of 10,000 is < 150 epochs.
  # 128 / 10000 in float64: default rel=1e-6.
  assert make_config().total_epochs == pytest.approx(0.0128)


@pytest.mark.parametrize('overrides,message', [
    (dict(train_batch_size=12, num_replicas=8, use_tpu=True),
     'train_batch_size 12 is not divisible by the 8 replicas'),
    (dict(eval_batch_size=100, num_replicas=8, use_tpu=True),
     'eval_batch_size 100 is not divisible by the 8 replicas'),
    (dict(num_replicas=2), 'num_replicas=2 needs use_tpu'),
    (dict(indices='1:x'), "indices: architecture string entry 1 is 'x'"),
    (dict(mode='fit'), "unknown mode 'fit'; valid choices: train, evaluate"),
    (dict(eval_split='train'), "unknown eval_split 'train'"),
    (dict(train_split='train_full', eval_split='validation'),
     'eval_split validation is part of train_split train_full'),
    (dict(dropout_rate=1.0), r'dropout_rate must be in \[0, 1\), got 1.0'),
    (dict(image_size=16), 'image_size 16 is outside the valid range 28..512'),
    (dict(max_steps=None, num_train_examples=0),
     'epochs and the training split size must be positive'),
])
def test_bad_values_are_one_line_errors(overrides, message):
  with pytest.raises(ConfigError, match=message) as error:
    make_config(**overrides)
  assert '\n' not in str(error.value)


def test_json_round_trip_and_compatibility():
  c = make_config(init_from_search='/s', dropout_rate=0.1)
  assert TrainEvalConfig.from_json(c.to_json()) == c
  other_arch = dataclasses.replace(c, indices=SMALLEST)
  assert c.incompatibilities(other_arch) == {'indices': (SMALLEST, LARGEST)}
  # Runtime fields may change; an evaluation ignores training flags.
  assert not c.incompatibilities(dataclasses.replace(
      c, model_dir='/b', eval_split='validation', steps_per_eval=2))
  evaluation = dataclasses.replace(c, mode='evaluate', max_steps=9,
                                   init_from_search=None)
  assert not evaluation.incompatibilities(c)
  assert list(dataclasses.replace(evaluation, indices=SMALLEST)
              .incompatibilities(c)) == ['indices']
  search = tiny.tiny_config('/s')
  with pytest.raises(config_lib.OtherJobError,
                     match='holds a search, not a train_eval'):
    TrainEvalConfig.from_json(search.to_json())


# Model dir checks -----------------------------------------------------------

def test_model_dir_refuses_another_architecture(tmp_path):
  assert train_eval.prepare(make_config(tmp_path), SPEC) is None
  saved = json.loads((tmp_path / 'config.json').read_text())
  assert saved['indices'] == LARGEST
  assert serialization.loads((tmp_path / 'model_spec.json').read_text())
  with pytest.raises(ConfigError, match=r'incompatible config: indices \(was '
                     f"'{LARGEST}', now '{SMALLEST}'"):
    train_eval.prepare(make_config(tmp_path, indices=SMALLEST), SPEC)
  with pytest.raises(ConfigError, match='nothing to evaluate'):
    train_eval.prepare(make_config(tmp_path, mode='evaluate'), SPEC)
  loaded, spec = train_eval.load_run(str(tmp_path))
  assert loaded == make_config(tmp_path)
  assert serialization.dumps(spec) == serialization.dumps(SPEC)


def test_indices_must_fit_the_spec(tmp_path):
  with pytest.raises(ConfigError, match='indices: architecture has 3 indices '
                     'but the search space has 7 decisions'):
    train_eval.prepare(make_config(tmp_path, indices='0:0:0'), SPEC)
  assert not os.listdir(tmp_path)


def test_a_search_dir_is_not_a_train_eval_dir(tmp_path):
  config_lib.write_or_check(tiny.tiny_config(tmp_path),
                            serialization.dumps(SPEC, indent=1))
  with pytest.raises(ConfigError) as error:
    train_eval.prepare(make_config(tmp_path), SPEC)
  assert str(error.value) == (
      f'model dir {tmp_path} holds a search, not a train_eval run '
      '(--search_model_dir or --init_from_search use a search); use another '
      '--model_dir')
  # Exporting reads the dir through load_run: the same message.
  with pytest.raises(ConfigError) as loading:
    train_eval.load_run(str(tmp_path))
  assert str(loading.value) == str(error.value)


def test_load_run_names_a_damaged_config(tmp_path):
  assert train_eval.prepare(make_config(tmp_path), SPEC) is None
  (tmp_path / 'config.json').write_text('{"indices": ')
  with pytest.raises(ConfigError, match=(
      rf'^{tmp_path}/config.json is damaged or not a tunas_search config '
      r'\(Expecting value')):
    train_eval.load_run(str(tmp_path))


# Warm start -----------------------------------------------------------------

def write_search(model_dir, spec=SPEC, indices=LARGEST, drop=(), extra=None,
                 **overrides):
  """A search dir whose checkpoint holds a largest-width network's weights.

  `extra` (name -> value) adds tensors to the checkpoint.

  Returns:
    name -> saved value.
  """
  config_lib.write_or_check(tiny.tiny_config(model_dir, **overrides),
                            serialization.dumps(spec, indent=1))
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    images = tf.zeros([2, 28, 28, 1])
    _, variables = model_fn.network(
        make_config(), architecture.with_indices(
            spec, architecture.parse_indices(indices)), images, False)
    step = tf1.train.get_or_create_global_step()
    keep = [v for v in variables if 'moving' not in v.name]  # 'batch' BN.
    keep = [v for v in keep if v.name.split(':')[0] not in drop]
    keep += [tf1.get_variable(name, initializer=value, trainable=False)
             for name, value in (extra or {}).items()]
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      session.run(step.assign(5))
      tf1.train.Saver(keep + [step]).save(
          session, os.path.join(str(model_dir), 'model.ckpt'), global_step=5)
      return {v.name.split(':')[0]: session.run(v) for v in keep}


def standalone_variables(indices):
  tf1.set_random_seed(1)
  images = tf.zeros([2, 28, 28, 1])
  return model_fn.network(make_config(indices=indices),
                          architecture.with_indices(
                              SPEC, architecture.parse_indices(indices)),
                          images, True)[1]


def test_warm_start_loads_prefix_slices(tmp_path):
  saved = write_search(tmp_path)
  weights = warm_start.SearchWeights.open(str(tmp_path), SPEC, 10, 1)
  assert weights.step == 5
  assert weights.checkpoint.endswith('model.ckpt-5')
  with tf.Graph().as_default():
    variables = standalone_variables(SMALLEST)
    pairs = weights.assignments(variables)
    init_fn = warm_start.scaffold_init_fn(pairs)
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      init_fn(None, session)
      values = {v.name.split(':')[0]: session.run(v) for v in variables}
  stem = values['blocks/0/layers/0/conv_k3/kernel']
  assert stem.shape == (3, 3, 1, 8)
  np.testing.assert_array_equal(
      stem, saved['blocks/0/layers/0/conv_k3/kernel'][:, :, :, :8])
  np.testing.assert_array_equal(values['classifier/kernel'],
                                saved['classifier/kernel'][:32])
  # Moving statistics are not in a search checkpoint: initial values kept.
  assert not any('moving' in name for name in saved)
  np.testing.assert_array_equal(
      values['blocks/0/layers/0/bn_k3/moving_variance'], np.ones(8))


def test_warm_start_takes_the_missed_steps_of_deferred_weights(tmp_path):
  # The stem's kernel was last used in step 1 (current to 2): at step 5 it
  # has missed 3 momentum steps (docs/method.md, "Deferred steps of unused
  # weights"); the classifier is not deferred.
  stem = 'blocks/0/layers/0/conv_k3/kernel'
  momentum = np.full([3, 3, 1, 16], 0.01, np.float32)
  saved = write_search(tmp_path, extra={
      deferred.NAMES: np.array([stem.encode()]),
      deferred.CURRENT_TO: np.array([2], np.int64),
      f'{stem}/{deferred.MOMENTUM_SLOT}': momentum})
  weights = warm_start.SearchWeights.open(str(tmp_path), SPEC, 10, 1)
  with tf.Graph().as_default():
    variables = standalone_variables(LARGEST)
    values = dict((v.op.name, value)
                  for v, value in weights.assignments(variables))
  mu = tiny.tiny_config(tmp_path / 'x').model_momentum
  shift = mu + mu**2 + mu**3
  np.testing.assert_allclose(values[stem], saved[stem] - 0.01 * shift,
                             rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(values['classifier/kernel'],
                                saved['classifier/kernel'])


def test_warm_start_names_a_missing_variable(tmp_path):
  write_search(tmp_path, drop=('blocks/1/layers/0/project/kernel',))
  weights = warm_start.SearchWeights.open(str(tmp_path), SPEC, 10, 1)
  with tf.Graph().as_default():
    variables = standalone_variables(SMALLEST)
    with pytest.raises(warm_start.WarmStartError,
                       match="has no variable 'blocks/1/layers/0/project/"
                       "kernel'; was it written by a search of this space"):
      weights.assignments(variables)


def test_warm_start_refuses_bad_search_dirs(tmp_path):
  with pytest.raises(warm_start.WarmStartError,
                     match='init_from_search: model dir .* does not exist'):
    warm_start.SearchWeights.open(str(tmp_path / 'none'), SPEC, 10, 1)
  config_lib.write_or_check(tiny.tiny_config(tmp_path / 'fresh'),
                            serialization.dumps(SPEC, indent=1))
  with pytest.raises(warm_start.WarmStartError, match='has no checkpoint yet'):
    warm_start.SearchWeights.open(str(tmp_path / 'fresh'), SPEC, 10, 1)
  with pytest.raises(warm_start.WarmStartError,
                     match="searched 'tiny', a different space"):
    warm_start.SearchWeights.open(str(tmp_path / 'fresh'),
                                  architecture.prune(SPEC, [0] * 7), 10, 1)
  with pytest.raises(warm_start.WarmStartError,
                     match='searched with num_classes=10, this run has 5'):
    warm_start.SearchWeights.open(str(tmp_path / 'fresh'), SPEC, 5, 1)
  # A bad init dir is refused before the model dir is written.
  with pytest.raises(warm_start.WarmStartError, match='has no checkpoint'):
    train_eval.prepare(make_config(tmp_path / 'run', init_from_search=str(
        tmp_path / 'fresh')), SPEC)
  assert not os.path.exists(tmp_path / 'run')


def test_warm_start_names_an_unreadable_checkpoint(tmp_path):
  write_search(tmp_path)
  latest = tf.train.latest_checkpoint(str(tmp_path))
  with open(latest + '.index', 'r+b') as f:
    f.truncate(3)
  with pytest.raises(warm_start.WarmStartError, match=(
      f'^init_from_search: cannot read checkpoint {latest} of {tmp_path}: ')):
    warm_start.SearchWeights.open(str(tmp_path), SPEC, 10, 1)


def test_tpu_evaluation_needs_a_split_of_one_batch_before_training(tmp_path):
  # The embedded test split has 2,000 images: no whole batch of 4,096.
  config = make_config(tmp_path / 'run', use_tpu=True, eval_batch_size=4096)
  with pytest.raises(ConfigError, match=(
      'the test split of embedded has 2000 examples; a TPU evaluates whole '
      'batches of eval_batch_size 4096')):
    train_eval.prepare(config, SPEC)
  assert not os.path.exists(tmp_path / 'run')
  train_eval.check_inputs(dataclasses.replace(config, mode='train'))


# Evaluation -----------------------------------------------------------------

class _FakeEstimator:
  """Returns fixed metrics from `evaluate`, recording how it was called."""

  def __init__(self, metrics):
    self.metrics, self.calls = metrics, []

  def evaluate(self, input_fn, steps, name):
    self.calls.append((steps, name))
    return self.metrics


@pytest.mark.parametrize('use_tpu,steps,examples', [
    (False, None, 2000),
    # A TPU evaluates whole batches: 6 of 300 of the 2,000 test images.
    (True, 6, 1800)])
def test_evaluation_reports_the_estimators_numbers(tmp_path, use_tpu, steps,
                                                   examples):
  config = make_config(tmp_path / 'run', use_tpu=use_tpu, eval_batch_size=300)
  os.makedirs(config.model_dir)
  metrics = {'top_1_accuracy': np.float32(0.25),
             'top_5_accuracy': np.float32(0.75), 'loss': np.float32(1.5),
             'global_step': np.int64(7)}
  estimator = _FakeEstimator(metrics)
  result = train_eval._evaluate(estimator, config, SPEC)
  assert estimator.calls == [(steps, 'test')]
  assert (result.top_1_accuracy, result.top_5_accuracy, result.loss,
          result.global_step, result.num_examples, result.split) == (
              0.25, 0.75, 1.5, 7, examples, 'test')
  assert result.architecture == LARGEST
  with open(train_eval.results_path(config.model_dir, 'test')) as f:
    saved = json.load(f)
  assert saved == dataclasses.asdict(result)


# CLI ------------------------------------------------------------------------

def run_cli(*args):
  flag_values = flags.FlagValues()
  train_eval_cli.define_flags(flag_values)
  flag_values(['train_eval'] + list(args))
  return train_eval_cli.build_config(flag_values)


def test_cli_builds_the_config(tmp_path):
  config, spec = run_cli('--search_space=proxylessnas_mobile',
                         f'--model_dir={tmp_path}', '--train_batch_size=64',
                         '--max_steps=10', '--image_size=32')
  assert config.search_space == 'proxylessnas_mobile'
  assert config.indices == architecture.format_indices(
      train_eval_cli.search_spaces.get('proxylessnas_mobile')
      .default_indices())
  assert (config.num_classes, config.input_channels) == (10, 1)
  assert config.num_train_examples == 10_000  # The embedded 'train' split.
  assert len(architecture.parse_indices(config.indices, spec)) == 73


@pytest.mark.parametrize('args,message', [
    (['--search_space=nope'], "unknown search space 'nope'; valid choices"),
    (['--search_space=mobilenet_v2', '--indices=0:x'],
     "--indices: architecture string entry 1 is 'x'"),
    (['--search_space=mobilenet_v2', '--indices=0:1'],
     '--indices: architecture has 2 indices but the search space has 73'),
    (['--search_space=mobilenet_v2', '--dataset=nope'],
     "unknown dataset 'nope'"),
    (['--search_space=mobilenet_v2', '--use_tpu', '--tpu=x',
      '--train_batch_size=100'],
     'train_batch_size 100 is not divisible by the 8 replicas'),
    (['--search_space=mobilenet_v2', '--search_model_dir=/x'],
     'give either --search_model_dir or --search_space'),
    (['--search_model_dir=/nonexistent'],
     '--search_model_dir: model dir /nonexistent does not exist'),
    ([], '--search_space or --search_model_dir is required'),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
  with pytest.raises(cli.UsageError, match=message) as error:
    run_cli(f'--model_dir={tmp_path}', *args)
  assert '\n' not in str(error.value)
