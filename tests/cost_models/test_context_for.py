"""Tests for cost_models.NONE and cost_models.context_for."""

import pytest

from tunas_search import cost_models
from tunas_search.config import SearchConfig
from tunas_search.registry import UnknownNameError


def _config(**overrides):
  values = dict(search_space='proxylessnas_search', model_dir='/tmp/unused',
                num_classes=10, num_train_examples=1000, image_size=32,
                input_channels=1, train_batch_size=32,
                rl_cost_model_target=84.0)
  values.update(overrides)
  return SearchConfig(**values)


def test_context_for_reads_the_search_config():
  assert cost_models.context_for(_config()) == cost_models.CostContext(
      'proxylessnas_search', image_size=32, num_classes=10, input_channels=1)


def test_context_for_scores_in_the_cost_model_space():
  config = _config(cost_model_space='proxylessnas_enlarged_search')
  assert (cost_models.context_for(config).space_name ==
          'proxylessnas_enlarged_search')


def test_none_is_not_a_registered_cost_model():
  assert cost_models.NONE not in cost_models.names()
  with pytest.raises(UnknownNameError):
    cost_models.get(cost_models.NONE)
  # A search without a cost model validates with no cost target.
  assert _config(cost_model=cost_models.NONE,
                 rl_cost_model_target=None).cost_model == 'none'

