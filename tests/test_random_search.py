"""Tests for tunas_search.random_search (rejection sampling in a window)."""

import numpy as np
import pytest

import search_spaces
from tunas_search import architecture
from tunas_search import cost_models
from tunas_search import random_search

SPACE = 'proxylessnas_search'


@pytest.fixture(scope='module')
def setup():
  spec = search_spaces.get(SPACE).spec()
  return (spec, cost_models.get('pixel1_latency'),
          cost_models.CostContext(SPACE))


def test_samples_lie_in_window_and_are_canonical(setup):
  spec, model, context = setup
  samples = random_search.sample(spec, model, context, num_samples=3,
                                 min_cost=83.0, max_cost=85.0, seed=0)
  assert len(samples) == 3
  for s in samples:
    assert 83.0 <= s.cost <= 85.0
    assert s.cost == model.cost(spec, s.indices, context)
    assert s.indices == architecture.canonicalize(spec, s.indices)
    assert s.architecture == architecture.format_indices(s.indices)
    assert s.block_string == architecture.block_string(
        architecture.prune(spec, s.indices))
    assert set(s.to_dict()) == {'architecture', 'block_string', 'cost'}


def test_same_seed_same_samples(setup):
  spec, model, context = setup
  draw = lambda seed: [s.architecture for s in random_search.sample(
      spec, model, context, num_samples=2, max_cost=90.0, seed=seed)]
  assert draw(3) == draw(3)
  assert draw(3) != draw(4)


def test_no_window_takes_the_first_draws_uniformly(setup):
  spec, model, context = setup
  samples = random_search.sample(spec, model, context, num_samples=2, seed=5)
  rng = np.random.default_rng(5)
  for s in samples:
    expected = architecture.canonicalize(
        spec, architecture.random_indices(spec, rng))
    assert s.indices == expected


def test_cost_range_is_smallest_and_largest(setup):
  spec, model, context = setup
  low, high = random_search.cost_range(spec, model, context)
  assert low == model.cost(spec, random_search.smallest(spec), context)
  assert high == model.cost(spec, architecture.largest(spec), context)
  assert 20.0 < low < 50.0 < 200.0 < high < 250.0  # ~31 and ~219 ms.


def test_smallest_skips_every_optional_layer(setup):
  spec, _, _ = setup
  tower = architecture.prune(spec, random_search.smallest(spec))
  text = architecture.block_string(tower)
  assert text.count('skip') == 15  # 3 optional layers in 5 blocks of 4.
  assert 'ib_k3_e3' in text and 'ib_k5' not in text


@pytest.mark.parametrize('low,high,match', [
    (300.0, 400.0, 'no architecture of proxylessnas_search costs'),
    (None, 5.0, r'costs \[-inf, 5\] ms'),
    (85.0, 83.0, 'min_cost 85 is above max_cost 83'),
])
def test_impossible_windows_fail_at_once(setup, low, high, match):
  spec, model, context = setup
  with pytest.raises(random_search.RandomSearchError, match=match):
    random_search.sample(spec, model, context, min_cost=low, max_cost=high,
                         seed=0, max_attempts=10**9)


def test_rare_window_stops_after_max_attempts(setup):
  spec, model, context = setup
  # Reachable (the largest network costs ~219 ms) but never drawn uniformly.
  with pytest.raises(random_search.RandomSearchError,
                     match='found 0 of 1 .* in 20 attempts'):
    random_search.sample(spec, model, context, min_cost=210.0, seed=0,
                         max_attempts=20)


def test_bad_arguments(setup):
  spec, model, context = setup
  with pytest.raises(random_search.RandomSearchError, match='at least 1'):
    random_search.sample(spec, model, context, num_samples=0)
  with pytest.raises(random_search.RandomSearchError, match='finite'):
    random_search.sample(spec, model, context, max_cost=float('nan'))
  with pytest.raises(random_search.RandomSearchError, match='does not apply'):
    random_search.sample(spec, model,
                         cost_models.CostContext('mobilenet_v3_like_search'))
