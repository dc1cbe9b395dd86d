"""Every SearchConfig check: its exact message and both sides of its bound.

Complements tests/config/test_config.py without TensorFlow (no model dir is
written), so that `make mutation` can run it for every config mutant.
"""

import math
import re

import pytest

from tunas_search import config as config_lib
from tunas_search.config import ConfigError, SearchConfig

_FRACTION = '{} must be in [0, 1], got {}'
_OPEN_FRACTION = '{} must be in [0, 1), got {}'
_HOST = ('controller_placement=host needs one replica off TPU (a replica\'s '
         'controller runs on its own device); use auto or default')
_DEFERRED = ('unused_weight_steps=deferred needs one replica off TPU (replicas '
             'sampling different architectures share their gradients); use '
             'every_step')


def _config(**overrides) -> SearchConfig:
  values = dict(search_space='proxylessnas_search', model_dir='/unused',
                num_classes=10, num_train_examples=1000, image_size=32,
                train_batch_size=32, rl_cost_model_target=84.0)
  values.update(overrides)
  return SearchConfig(**values)


def _tpu(replicas, **overrides):
  return dict(use_tpu=True, tpu='x', num_replicas=replicas, **overrides)


@pytest.mark.parametrize('overrides, message', [
    # Training fields (validate_training).
    (dict(num_replicas=0), 'num_replicas must be positive, got 0'),
    (dict(train_batch_size=0), 'train_batch_size must be positive, got 0'),
    (_tpu(8, train_batch_size=30), 'train_batch_size 30 is not divisible by '
     'the 8 replicas; use a multiple of 8'),
    # Off TPU a search mirrors over local devices; the batch must divide.
    (dict(num_replicas=3), 'train_batch_size 32 is not divisible by the 3 '
     'replicas; use a multiple of 3'),
    (dict(image_size=27), 'image_size 27 is outside the valid range 28..512'),
    (dict(image_size=513),
     'image_size 513 is outside the valid range 28..512'),
    (dict(num_classes=1), 'num_classes must be > 1, got 1'),
    (dict(max_steps=0), 'max_steps must be positive, got 0'),
    (dict(epochs=0.0), 'epochs and the training split size must be positive '
     '(or give max_steps); got epochs=0.0, num_train_examples=1000'),
    (dict(num_train_examples=0), 'epochs and the training split size must be '
     'positive (or give max_steps); got epochs=90.0, num_train_examples=0'),
    (dict(epochs=math.nan), 'epochs must be a finite number, got nan'),
    (dict(label_smoothing=-math.inf),
     'label_smoothing must be a finite number, got -inf'),
    (dict(model_warmup_steps_fraction=-0.5),
     _FRACTION.format('model_warmup_steps_fraction', -0.5)),
    (dict(model_warmup_steps_fraction=1.5),
     _FRACTION.format('model_warmup_steps_fraction', 1.5)),
    (dict(model_learning_rate=0.0),
     'model_learning_rate must be positive, got 0.0'),
    (dict(model_momentum=1.0), _OPEN_FRACTION.format('model_momentum', 1.0)),
    (dict(model_momentum=-0.5),
     _OPEN_FRACTION.format('model_momentum', -0.5)),
    (dict(model_rmsprop_decay=1.0),
     _OPEN_FRACTION.format('model_rmsprop_decay', 1.0)),
    (dict(model_rmsprop_epsilon=-0.5),
     'model_rmsprop_epsilon must be >= 0, got -0.5'),
    (dict(label_smoothing=1.0), _OPEN_FRACTION.format('label_smoothing', 1.0)),
    (dict(label_smoothing=-0.5),
     _OPEN_FRACTION.format('label_smoothing', -0.5)),
    (dict(model_weight_decay=-0.5),
     'model_weight_decay must be >= 0, got -0.5'),
    (dict(tpu_iterations_per_loop=0),
     'tpu_iterations_per_loop must be positive, got 0'),
    (dict(save_checkpoints_steps=0), 'save_checkpoints_steps must be positive '
     '(or unset: every 5 host loops), got 0'),
    (dict(keep_checkpoint_max=-1), 'keep_checkpoint_max must be >= 0 (0 keeps '
     'every checkpoint), got -1'),
    (dict(log_every_steps=0), 'log_every_steps must be positive, got 0'),
    # Search fields (_validate).
    (_tpu(8, train_batch_size=8, rl_batch_size_multiplier=1.5),
     'validation batch 12 (train_batch_size x rl_batch_size_multiplier) is '
     'not divisible by the 8 replicas'),
    (dict(rl_delay_steps_fraction=1.5),
     _FRACTION.format('rl_delay_steps_fraction', 1.5)),
    (dict(rl_delay_steps_fraction=-0.5),
     _FRACTION.format('rl_delay_steps_fraction', -0.5)),
    (dict(increase_ops_warmup_steps_fraction=-0.5),
     _FRACTION.format('increase_ops_warmup_steps_fraction', -0.5)),
    (dict(increase_filters_warmup_steps_fraction=-0.5),
     _FRACTION.format('increase_filters_warmup_steps_fraction', -0.5)),
    (dict(increase_filters_warmup_steps_fraction=0.5),
     'increase_filters_warmup_steps_fraction=0.5 is larger than '
     'rl_delay_steps_fraction=0.25; the warm-up must end before the '
     'controller starts learning'),
    (dict(rl_learning_rate=-0.5), 'rl_learning_rate must be >= 0 (0 freezes '
     'the controller), got -0.5'),
    (dict(rl_baseline_momentum=1.0),
     _OPEN_FRACTION.format('rl_baseline_momentum', 1.0)),
    (dict(rl_baseline_momentum=-0.5),
     _OPEN_FRACTION.format('rl_baseline_momentum', -0.5)),
    (dict(rl_batch_size_multiplier=0.5), 'rl_batch_size_multiplier must be a '
     'whole number >= 1, got 0.5'),
    (dict(rl_batch_size_multiplier=2.5), 'rl_batch_size_multiplier must be a '
     'whole number >= 1, got 2.5'),
    (dict(rl_temperature=0.0), 'rl_temperature must be positive, got 0.0'),
    (dict(cost_model='madds', rl_cost_model_target=None),
     "cost model 'madds' needs rl_cost_model_target"),
    (dict(rl_cost_model_target=0.0),
     'rl_cost_model_target must be positive, got 0.0'),
    (dict(cost_model='none', rl_cost_model_target=-0.5),
     'rl_cost_model_target must be positive, got -0.5'),
    (dict(constant_validation_accuracy=1.5),
     'constant_validation_accuracy must be in [0, 1], got 1.5'),
    (dict(constant_validation_accuracy=-0.5),
     'constant_validation_accuracy must be in [0, 1], got -0.5'),
    (dict(validation_weights='after'), "unknown validation_weights 'after'; "
     'valid choices: pre_update, post_update'),
    (dict(supernet_widths='narrow'), "unknown supernet_widths 'narrow'; "
     'valid choices: auto, sampled, masked'),
    (_tpu(8, supernet_widths='sampled'), 'supernet_widths=sampled cannot run '
     'on TPU: XLA needs static shapes; use masked or auto'),
    (dict(unused_weight_steps='lazy'), "unknown unused_weight_steps 'lazy'; "
     'valid choices: auto, every_step, deferred'),
    (_tpu(8, unused_weight_steps='deferred', supernet_widths='masked'),
     _DEFERRED),
    (dict(num_replicas=2, unused_weight_steps='deferred'), _DEFERRED),
    (dict(multi_worker=True, unused_weight_steps='deferred'), _DEFERRED),
    (dict(controller_placement='gpu'), "unknown controller_placement "
     "'gpu'; valid choices: auto, host, default"),
    (dict(num_replicas=2, controller_placement='host'), _HOST),
    (_tpu(8, controller_placement='host', supernet_widths='masked'), _HOST),
    (dict(step_build='jit'), "unknown step_build 'jit'; valid choices: "
     'auto, graph, xla'),
    (_tpu(8, step_build='graph', supernet_widths='masked'),
     'step_build=graph cannot run on TPU, which always compiles the step '
     'with XLA; use auto or xla'),
    (dict(num_replicas=2, step_build='xla'), 'step_build=xla off TPU needs '
     'one replica (the step is compiled as one program on one device); use '
     'auto or graph'),
    (dict(step_build='xla', controller_placement='host'), 'step_build=xla '
     'compiles the whole step on one device, so controller_placement=host '
     'cannot apply; use auto or default'),
    (dict(seed=-1), 'seed must be >= 0, got -1'),
    (dict(seed=config_lib.MAX_SEED + 1),
     f'seed must be at most {config_lib.MAX_SEED}, got '
     f'{config_lib.MAX_SEED + 1}'),
    (dict(cost_model='measured'), 'cost_model=measured needs cost_model_file '
     '(a latency_model.json of bin/calibrate_latency.py)'),
    (dict(cost_model_file='/x/latency_model.json'), 'cost_model_file is only '
     "read by cost_model=measured, not 'pixel1_latency'"),
])
def test_each_check_names_its_field_and_value(overrides, message):
  with pytest.raises(ConfigError, match=f'^{re.escape(message)}$'):
    _config(**overrides)


@pytest.mark.parametrize('overrides', [
    _tpu(8, train_batch_size=64),
    dict(train_batch_size=1),
    dict(epochs=0.5), dict(num_train_examples=1),
    dict(image_size=28), dict(image_size=224),
    dict(num_classes=2),
    dict(max_steps=1, epochs=0.0, num_train_examples=0),
    dict(model_warmup_steps_fraction=0.0),
    dict(model_warmup_steps_fraction=1.0),
    dict(model_momentum=0.0), dict(model_rmsprop_decay=0.0),
    dict(model_rmsprop_epsilon=0.0), dict(label_smoothing=0.0),
    dict(model_weight_decay=0.0),
    dict(tpu_iterations_per_loop=1), dict(save_checkpoints_steps=1),
    dict(keep_checkpoint_max=0), dict(log_every_steps=1),
    dict(rl_delay_steps_fraction=1.0),
    dict(rl_delay_steps_fraction=0.0, increase_ops_warmup_steps_fraction=0.0,
         increase_filters_warmup_steps_fraction=0.0),
    dict(rl_learning_rate=0.0), dict(rl_baseline_momentum=0.0),
    dict(rl_batch_size_multiplier=1.0), dict(rl_batch_size_multiplier=3),
    dict(rl_temperature=1e-3),
    dict(cost_model='none', rl_cost_model_target=None),
    dict(rl_cost_model_target=1e-3),
    dict(constant_validation_accuracy=0.0),
    dict(constant_validation_accuracy=1.0),
    dict(validation_weights='post_update'),
    dict(supernet_widths='masked'), dict(supernet_widths='sampled'),
    _tpu(8, supernet_widths='masked'),
    # A search mirrors over local devices off TPU (validate_training's
    # `mirrored`), unlike a train_eval run (below).
    dict(num_replicas=2),
    dict(unused_weight_steps='deferred'),
    # 'auto' runs anywhere: every_step where deferring cannot.
    _tpu(8, unused_weight_steps='auto', supernet_widths='masked'),
    dict(num_replicas=2, unused_weight_steps='auto'),
    dict(controller_placement='host'), dict(controller_placement='default'),
    dict(num_replicas=2, controller_placement='default'),
    dict(step_build='graph'), dict(step_build='xla'),
    _tpu(8, step_build='xla', supernet_widths='masked'),
    dict(step_build='xla', controller_placement='default'),
    dict(seed=0), dict(seed=config_lib.MAX_SEED),
    dict(cost_model='measured', cost_model_file='/x/latency_model.json'),
])
def test_the_edges_of_each_range_are_valid(overrides):
  config = _config(**overrides)
  for name, value in overrides.items():
    assert getattr(config, name) == value


def test_the_defaults_are_valid():
  _config()  # Every default of SearchConfig passes its own checks.


def test_check_raises_only_on_false():
  config_lib.check(True, 'unused')
  with pytest.raises(ConfigError, match='^the message$'):
    config_lib.check(False, 'the message')


def test_several_replicas_off_tpu_need_a_mirrored_job():
  # validate_training's default: a job that cannot mirror (train_eval).
  with pytest.raises(ConfigError, match=re.escape(
      'num_replicas=2 needs use_tpu; CPU/GPU runs use one replica') + '$'):
    config_lib.validate_training(_config(num_replicas=2))
  config_lib.validate_training(_config(**_tpu(2)))
  config_lib.validate_training(_config(num_replicas=2), mirrored=True)
