"""Tests for SearchConfig validation, derived values and resume checks."""

import dataclasses
import json
import logging
import os

import pytest

from tunas_search import config as config_lib
from tunas_search.config import ConfigError, SearchConfig
from tunas_search.config.standalone import TrainEvalConfig


def _config(tmp_path, **overrides):
  values = dict(search_space='proxylessnas_search', model_dir=str(tmp_path),
                num_classes=10, num_train_examples=10000, image_size=32,
                train_batch_size=32, rl_cost_model_target=84.0)
  values.update(overrides)
  return SearchConfig(**values)


def test_derived_values(tmp_path):
  c = _config(tmp_path, epochs=2.0)
  assert c.total_steps == 625  # 2 * 10000 / 32
  # Rounded down, as the released TuNAS (docs/method.md section 6).
  assert _config(tmp_path, epochs=1.0, num_train_examples=1000,
                 train_batch_size=32).total_steps == 31  # 31.25
  assert _config(tmp_path, epochs=0.001).total_steps == 1  # At least one.
  preset = _config(tmp_path, epochs=90.0, num_train_examples=1_231_121,
                   train_batch_size=4096)
  assert preset.total_steps == 27_050  # 27,050.5
  assert preset.fraction_steps(0.25) == 6_762
  assert c.validation_batch_size == 128  # 4 x training batch (docs/method.md section 6).
  assert c.scaled_model_learning_rate == pytest.approx(0.165 * 32 / 256)
  assert c.scaled_rl_learning_rate == pytest.approx(3e-4 * 32 / 256)
  # docs/method.md sections 5 and 6 at TuNAS's batch of 4096 (16 x 256).
  big = _config(tmp_path, train_batch_size=4096)
  assert big.scaled_model_learning_rate == pytest.approx(2.64)
  assert big.scaled_rl_learning_rate == pytest.approx(4.8e-3)
  assert c.weight_decay == 4e-5
  assert _config(tmp_path, use_bfloat16=True).weight_decay == 3e-5
  assert _config(tmp_path, max_steps=7).total_steps == 7
  assert c.fraction_steps(0.25) == 156
  assert c.iterations_per_checkpoint == 500


@pytest.mark.parametrize('overrides, message', [
    (dict(train_batch_size=30, num_replicas=8),
     'train_batch_size 30 is not divisible by the 8 replicas'),
    (dict(image_size=16), 'image_size 16 is outside the valid range 28..512'),
    (dict(rl_delay_steps_fraction=1.5),
     r'rl_delay_steps_fraction must be in \[0, 1\], got 1.5'),
    (dict(rl_cost_model_target=None),
     "cost model 'pixel1_latency' needs rl_cost_model_target"),
    (dict(max_steps=0), 'max_steps must be positive, got 0'),
    (dict(rl_baseline_momentum=1.0), r'rl_baseline_momentum must be in \[0, 1\)'),
    # Warm-ups must end by the RL delay (docs/method.md section 5).
    (dict(increase_ops_warmup_steps_fraction=0.3),
     r'^increase_ops_warmup_steps_fraction=0.3 is larger than '
     r'rl_delay_steps_fraction=0.25; the warm-up must end before'),
    (dict(rl_delay_steps_fraction=0.1),
     r'^increase_ops_warmup_steps_fraction=0.25 is larger than '
     r'rl_delay_steps_fraction=0.1'),
    (dict(increase_filters_warmup_steps_fraction=0.5,
          increase_ops_warmup_steps_fraction=0.0),
     r'^increase_filters_warmup_steps_fraction=0.5 is larger than '
     r'rl_delay_steps_fraction=0.25'),
    # Checkpointing.
    (dict(save_checkpoints_steps=0),
     r'save_checkpoints_steps must be positive \(or unset: every 5 host '
     r'loops\), got 0'),
    (dict(save_checkpoints_steps=-5), 'save_checkpoints_steps must be '
     r'positive .*, got -5'),
    (dict(keep_checkpoint_max=-1),
     r'keep_checkpoint_max must be >= 0 \(0 keeps every checkpoint\), got -1'),
    (dict(log_every_steps=0), 'log_every_steps must be positive, got 0'),
    # Optimizers.
    (dict(rl_learning_rate=-1e-4),
     r'rl_learning_rate must be >= 0 \(0 freezes the controller\), got '
     r'-0.0001'),
    (dict(model_momentum=-0.1), r'model_momentum must be in \[0, 1\), got -0.1'),
    (dict(model_momentum=1.0), r'model_momentum must be in \[0, 1\), got 1.0'),
    (dict(model_rmsprop_decay=1.5),
     r'model_rmsprop_decay must be in \[0, 1\), got 1.5'),
    (dict(model_rmsprop_epsilon=-1.0),
     'model_rmsprop_epsilon must be >= 0, got -1.0'),
    # Non-finite floats, whatever the field.
    (dict(model_learning_rate=float('nan')),
     'model_learning_rate must be a finite number, got nan'),
    (dict(model_learning_rate=float('inf')),
     'model_learning_rate must be a finite number, got inf'),
    (dict(rl_learning_rate=float('inf')),
     'rl_learning_rate must be a finite number, got inf'),
    (dict(rl_learning_rate=float('nan')),
     'rl_learning_rate must be a finite number, got nan'),
    (dict(epochs=float('inf')), 'epochs must be a finite number, got inf'),
    (dict(rl_cost_model_exponent=float('-inf')),
     'rl_cost_model_exponent must be a finite number, got -inf'),
    (dict(rl_entropy_regularization=float('nan')),
     'rl_entropy_regularization must be a finite number, got nan'),
    (dict(model_weight_decay=float('nan')),
     'model_weight_decay must be a finite number, got nan'),
    (dict(rl_cost_model_target=float('inf')),
     'rl_cost_model_target must be a finite number, got inf'),
    (dict(validation_weights='after'), "unknown validation_weights 'after'; "
     'valid choices: pre_update, post_update'),
])
def test_bad_values_name_themselves(tmp_path, overrides, message):
  with pytest.raises(ConfigError, match=message) as error:
    _config(tmp_path, **overrides)
  assert '\n' not in str(error.value)


@pytest.mark.parametrize('overrides', [
    dict(increase_ops_warmup_steps_fraction=0.25,
         increase_filters_warmup_steps_fraction=0.25),  # Equal: the default.
    dict(rl_delay_steps_fraction=0.0, increase_ops_warmup_steps_fraction=0.0,
         increase_filters_warmup_steps_fraction=0.0),
    dict(save_checkpoints_steps=1, keep_checkpoint_max=0, rl_learning_rate=0.0,
         model_momentum=0.0, log_every_steps=1),
])
def test_edges_of_the_valid_ranges_are_accepted(tmp_path, overrides):
  config = _config(tmp_path, **overrides)
  for name, value in overrides.items():
    assert getattr(config, name) == value


def test_train_eval_config_refuses_non_finite_values_too(tmp_path):
  with pytest.raises(ConfigError, match='dropout_rate must be a finite '
                     'number, got nan'):
    TrainEvalConfig(search_space='tiny', indices='0', model_dir=str(tmp_path),
                    num_classes=10, num_train_examples=100, image_size=32,
                    train_batch_size=4, dropout_rate=float('nan'))


def test_cost_model_space_defaults_to_the_search_space(tmp_path):
  plain = _config(tmp_path)
  assert plain.cost_model_space is None
  assert plain.effective_cost_model_space == 'proxylessnas_search'
  other = _config(tmp_path, cost_model_space='proxylessnas_enlarged_search')
  assert other.effective_cost_model_space == 'proxylessnas_enlarged_search'
  # The search step and the analysis score in this space (one rule).
  from tunas_search import cost_models  # pylint: disable=g-import-not-at-top
  assert cost_models.context_for(plain).space_name == 'proxylessnas_search'
  assert (cost_models.context_for(other).space_name ==
          'proxylessnas_enlarged_search')


def test_a_config_written_before_unused_weight_steps_reads_as_every_step(
    tmp_path):
  # Its checkpoints hold no deferred state: resuming it with deferred steps
  # must be refused, not restore half a state (tests/config/test_plan.py).
  c = _config(tmp_path, unused_weight_steps='deferred')
  old = json.loads(c.to_json())
  del old['unused_weight_steps']
  stored = SearchConfig.from_json(json.dumps(old))
  assert stored.unused_weight_steps == 'every_step'
  # The step plan, not the config comparison, checks the resolved value.
  assert 'unused_weight_steps' not in stored.incompatibilities(c)


def test_json_round_trip(tmp_path):
  c = _config(tmp_path, seed=3, use_bfloat16=True)
  assert SearchConfig.from_json(c.to_json()) == c
  bad = json.loads(c.to_json())
  bad['frobnicate'] = 1
  with pytest.raises(ConfigError, match=r"unknown config field\(s\) \['frobnicate'\]"):
    SearchConfig.from_json(json.dumps(bad))


def test_write_then_resume_then_refuse(tmp_path):
  c = _config(tmp_path)
  assert config_lib.write_or_check(c, '{"spec": 1}') is False
  assert os.path.exists(tmp_path / 'config.json')
  assert (tmp_path / 'model_spec.json').read_text() == '{"spec": 1}'
  # Same run again, with only run-time fields changed: a resume.
  again = dataclasses.replace(c, tpu_iterations_per_loop=7, data_dir='/x')
  assert config_lib.write_or_check(again, '{"spec": 1}') is True
  with pytest.raises(ConfigError, match="holds a search of 'proxylessnas_search', "
                     "not 'mobilenet_v3_like_search'"):
    config_lib.write_or_check(
        dataclasses.replace(c, search_space='mobilenet_v3_like_search'), '{}')
  with pytest.raises(ConfigError, match=r'incompatible config: train_batch_size '
                     r'\(was 32, now 64\)'):
    config_lib.write_or_check(dataclasses.replace(c, train_batch_size=64),
                              '{"spec": 1}')
  with pytest.raises(ConfigError, match='holds a different model spec'):
    config_lib.write_or_check(c, '{"spec": 2}')
  # Refusals wrote nothing.
  assert SearchConfig.from_json((tmp_path / 'config.json').read_text()) == c


def test_resume_with_lower_learning_rates_rewrites_config_json(tmp_path,
                                                             caplog):
  c = _config(tmp_path)
  config_lib.write_or_check(c, '{"spec": 1}')
  lower = dataclasses.replace(c, model_learning_rate=0.05,
                              rl_learning_rate=1e-4, data_dir='/elsewhere')
  assert lower.incompatibilities(c) == {}
  assert lower.resumable_changes(c) == {
      'model_learning_rate': (0.165, 0.05), 'rl_learning_rate': (3e-4, 1e-4)}
  with caplog.at_level(logging.INFO):
    assert config_lib.write_or_check(lower, '{"spec": 1}') is True
  stored = SearchConfig.from_json((tmp_path / 'config.json').read_text())
  # The learning rates are recorded; run-time fields keep the first run's.
  assert stored == dataclasses.replace(c, model_learning_rate=0.05,
                                       rl_learning_rate=1e-4)
  assert not os.path.exists(tmp_path / 'config.json.tmp')
  assert ('with changed model_learning_rate 0.165 -> 0.05, rl_learning_rate '
          '0.0003 -> 0.0001 (config.json updated)') in caplog.text
  # The next resume compares with the new values: the old rate is a change.
  assert config_lib.write_or_check(lower, '{"spec": 1}') is True
  with pytest.raises(ConfigError, match='incompatible config'):
    config_lib.write_or_check(
        dataclasses.replace(lower, model_weight_decay=1e-5), '{"spec": 1}')


def test_resume_refuses_other_changes_and_keeps_config_json(tmp_path):
  c = _config(tmp_path)
  config_lib.write_or_check(c, '{"spec": 1}')
  before = (tmp_path / 'config.json').read_text()
  for overrides, message in [
      (dict(model_weight_decay=1e-5), r'model_weight_decay \(was None, now '
       r'1e-05\)'),
      (dict(model_learning_rate=0.05, model_momentum=0.5),
       r'incompatible config: model_momentum \(was 0.9, now 0.5\)$'),
      (dict(rl_learning_rate=1e-4, rl_delay_steps_fraction=0.5),
       r'rl_delay_steps_fraction \(was 0.25, now 0.5\)$')]:
    with pytest.raises(ConfigError, match=message):
      config_lib.write_or_check(dataclasses.replace(c, **overrides),
                                '{"spec": 1}')
  with pytest.raises(ConfigError, match='holds a different model spec'):
    config_lib.write_or_check(dataclasses.replace(c, rl_learning_rate=1e-4),
                              '{"spec": 2}')
  # A refused resume leaves config.json as it was, learning rates included.
  assert (tmp_path / 'config.json').read_text() == before


def test_train_eval_runs_keep_their_learning_rate(tmp_path):
  """Only a search's learning rates may change on resume (RESUMABLE_FIELDS)."""
  assert config_lib.RESUMABLE_FIELDS == {'model_learning_rate',
                                         'rl_learning_rate'}
  assert TrainEvalConfig.resumable_fields == frozenset()
  c = TrainEvalConfig(search_space='tiny', indices='0', model_dir=str(tmp_path),
                      num_classes=10, num_train_examples=100, image_size=32,
                      train_batch_size=4)
  config_lib.write_or_check(c, '{}')
  with pytest.raises(ConfigError, match=r'model_learning_rate \(was 0.165, '
                     r'now 0.05\)'):
    config_lib.write_or_check(
        dataclasses.replace(c, model_learning_rate=0.05), '{}')


@pytest.mark.parametrize('config_class', [SearchConfig, TrainEvalConfig])
def test_every_option_has_one_line_help_and_valid_choices(config_class):
  """The CLIs make their flags from these (bin/config_flags.py)."""
  for field in dataclasses.fields(config_class):
    if field.default is dataclasses.MISSING:
      continue  # Required: the CLI derives it (search_space, num_classes).
    help_text = field.metadata.get(config_lib.HELP)
    assert help_text and '\n' not in help_text, field.name
    choices = field.metadata.get(config_lib.CHOICES)
    assert choices is None or field.default in choices, field.name
  by_name = {f.name: f for f in dataclasses.fields(SearchConfig)}
  assert by_name['validation_weights'].metadata[config_lib.CHOICES] == (
      config_lib.VALIDATION_WEIGHTS)


@pytest.mark.parametrize('text, reason', [
    ('{"search_space": "proxylessnas_search"', 'Expecting'),  # Truncated.
    ('{"search_space": "proxylessnas_search"}',  # Incomplete.
     "missing 3 required positional arguments: 'model_dir', 'num_classes', "
     "and 'num_train_examples'"),
    ('{"search_space": "proxylessnas_search", "model_dir": "d", '
     '"num_classes": "ten", "num_train_examples": 5}',  # Wrongly typed.
     "'>' not supported"),
])
def test_damaged_config_json_is_one_line_and_left_alone(tmp_path, text,
                                                        reason):
  path = tmp_path / config_lib.CONFIG_FILENAME
  path.write_text(text)
  with pytest.raises(ConfigError) as error:
    config_lib.write_or_check(_config(tmp_path), '{"spec": 1}')
  message = str(error.value)
  assert message.startswith(f'{path} is damaged or not a tunas_search '
                            'config (')
  assert reason in message and '\n' not in message
  assert message.endswith('restore it or use another --model_dir')
  assert path.read_text() == text
  assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_width_form_may_change_on_resume(tmp_path):
  # Same variables and values in both forms (docs/method.md section 4).
  c = _config(tmp_path)
  masked = dataclasses.replace(c, supernet_widths='masked')
  assert masked.incompatibilities(c) == {}
  assert masked.resumable_changes(c) == {}


def test_controller_placement_may_change_on_resume(tmp_path):
  # Where the controller's ops run changes no variable and no value.
  c = _config(tmp_path)
  for placement in ('host', 'default'):
    moved = dataclasses.replace(c, controller_placement=placement)
    assert moved.incompatibilities(c) == {}
    assert moved.resumable_changes(c) == {}


def test_step_build_may_change_on_resume(tmp_path):
  # The variables are the same; the plan checks the run's update
  # (tests/config/test_plan.py).
  c = _config(tmp_path)
  for build in ('graph', 'xla'):
    moved = dataclasses.replace(c, step_build=build)
    assert moved.incompatibilities(c) == {}
    assert moved.resumable_changes(c) == {}


def test_a_config_written_before_step_build_reads_as_auto(tmp_path):
  old = json.loads(_config(tmp_path).to_json())
  del old['step_build']
  assert SearchConfig.from_json(json.dumps(old)).step_build == 'auto'


def test_a_config_written_before_controller_placement_reads_as_auto(tmp_path):
  old = json.loads(_config(tmp_path).to_json())
  del old['controller_placement']
  assert SearchConfig.from_json(json.dumps(old)).controller_placement == 'auto'
