"""Tests for SearchConfig validation, derived values and resume checks."""

import dataclasses
import json
import os

import pytest

from tunas_search import config as config_lib
from tunas_search.config import ConfigError, SearchConfig


def _config(tmp_path, **overrides):
  values = dict(search_space='proxylessnas_search', model_dir=str(tmp_path),
                num_classes=10, num_train_examples=10000, image_size=32,
                train_batch_size=32, rl_cost_model_target=84.0)
  values.update(overrides)
  return SearchConfig(**values)


def test_derived_values(tmp_path):
  c = _config(tmp_path, epochs=2.0)
  assert c.total_steps == 625  # ceil(2 * 10000 / 32)
  assert c.validation_batch_size == 128  # 4 x training batch (SPEC 6).
  assert c.scaled_model_learning_rate == pytest.approx(0.165 * 32 / 256)
  assert c.scaled_rl_learning_rate == pytest.approx(3e-4 * 32 / 256)
  # SPEC.md sections 5 and 6 at TuNAS's batch of 4096 (16 x 256).
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
    (dict(image_size=16), 'image_size 16 is outside the valid range 28..224'),
    (dict(rl_delay_steps_fraction=1.5),
     r'rl_delay_steps_fraction must be in \[0, 1\], got 1.5'),
    (dict(rl_cost_model_target=None),
     "cost model 'pixel1_latency' needs rl_cost_model_target"),
    (dict(max_steps=0), 'max_steps must be positive, got 0'),
    (dict(rl_baseline_momentum=1.0), r'rl_baseline_momentum must be in \[0, 1\)'),
])
def test_bad_values_name_themselves(tmp_path, overrides, message):
  with pytest.raises(ConfigError, match=message):
    _config(tmp_path, **overrides)


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
