"""Tests for tunas_search.search.random_search (rejection sampling in a window).

Most tests sample the tiny end-to-end space under exact MAdds (~1 ms per
draw); those about the TuNAS control itself use proxylessnas_search under
the Pixel-1 latency model (~10 ms per draw), with few draws each.
"""

import logging
import re

import numpy as np
import pytest

import search_spaces
from tests.e2e import tiny
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.search import random_search
from tunas_search.space import schema
from tunas_search.space import specs

SPACE = 'proxylessnas_search'
# The tiny space's MAdds at 28x28x1 with 10 classes run from 46,184 (the
# smallest network) to 589,496 (the largest); the median draw is ~149k.
TINY_LOW, TINY_HIGH = 46184.0, 589496.0


@pytest.fixture(scope='module')
def setup():
  spec = search_spaces.get(SPACE).spec()
  return (spec, cost_models.get('pixel1_latency'),
          cost_models.CostContext(SPACE))


@pytest.fixture(scope='module')
def tiny_setup():
  return (tiny.tiny_spec(), cost_models.get('madds'),
          cost_models.CostContext(None, 28, 10, 1))


def test_samples_lie_in_window_and_are_canonical(setup):
  spec, model, context = setup
  # Around the TuNAS target (84 ms); ~20% of uniform draws land here.
  samples = random_search.sample(spec, model, context, num_samples=2,
                                 min_cost=80.0, max_cost=90.0, seed=0)
  assert len(samples) == 2
  for s in samples:
    assert 80.0 <= s.cost <= 90.0
    assert s.cost == model.cost(spec, s.indices, context)
    assert s.indices == architecture.canonicalize(spec, s.indices)
    assert s.architecture == architecture.format_indices(s.indices)
    assert s.block_string == architecture.block_string(
        architecture.prune(spec, s.indices))
    assert s.to_dict() == {'architecture': s.architecture,
                           'block_string': s.block_string, 'cost': s.cost}


def test_same_seed_same_samples(tiny_setup):
  spec, model, context = tiny_setup
  draw = lambda seed: [s.architecture for s in random_search.sample(
      spec, model, context, num_samples=3, max_cost=150e3, seed=seed)]
  assert draw(3) == draw(3)
  assert draw(3) != draw(4)


def test_no_window_takes_the_first_draws_uniformly(tiny_setup):
  spec, model, context = tiny_setup
  samples = random_search.sample(spec, model, context, num_samples=3, seed=5)
  rng = np.random.default_rng(5)
  for s in samples:
    expected = architecture.canonicalize(
        spec, architecture.random_indices(spec, rng))
    assert s.indices == expected


def test_window_bounds_are_inclusive(tiny_setup):
  spec, model, context = tiny_setup
  # Only the smallest network costs exactly TINY_LOW; the window [LOW, LOW]
  # holds nothing else, and the second-cheapest network costs 52,456.
  (s,) = random_search.sample(spec, model, context, min_cost=TINY_LOW,
                              max_cost=TINY_LOW, seed=0, max_attempts=2000)
  assert s.cost == TINY_LOW
  assert s.indices == random_search.smallest(spec)
  (s,) = random_search.sample(spec, model, context, min_cost=TINY_HIGH,
                              seed=0, max_attempts=2000)
  assert s.cost == TINY_HIGH


def test_cost_range_is_smallest_and_largest(setup, tiny_setup):
  spec, model, context = setup
  low, high = random_search.cost_range(spec, model, context)
  assert low == model.cost(spec, random_search.smallest(spec), context)
  assert high == model.cost(spec, architecture.largest(spec), context)
  assert 20.0 < low < 50.0 < 200.0 < high < 250.0  # ~31 and ~219 ms.
  assert random_search.cost_range(*tiny_setup) == (TINY_LOW, TINY_HIGH)


def test_smallest_skips_every_optional_layer(setup):
  spec, _, _ = setup
  tower = architecture.prune(spec, random_search.smallest(spec))
  text = architecture.block_string(tower)
  assert text.count('skip') == 15  # 3 optional layers in 5 blocks of 4.
  assert 'ib_k3_e3' in text and 'ib_k5' not in text


def test_smallest_takes_the_first_zero_else_the_first_choice(tiny_setup):
  layer = specs.Conv(schema.OneOf([3, 5], schema.OP))
  spec = specs.ConvTower((specs.Block((specs.Residual(schema.OneOf(
      [layer, specs.Zero(), specs.Zero()], schema.OP)),), 8),))
  # Decisions: the nested kernel (0), then the layer choice (1).
  assert random_search.smallest(spec) == [0, 1]
  assert random_search.smallest(tiny_setup[0]) == [0, 0, 0, 0, 0, 1, 0]


@pytest.mark.parametrize('low,high,message', [
    (300.0, 400.0, 'no architecture of proxylessnas_search costs [300, 400] '
                   'ms under pixel1_latency: costs range from 30.94 (smallest '
                   'network) to 219.1 (largest)'),
    (None, 5.0, 'no architecture of proxylessnas_search costs [-inf, 5] ms'),
    (300.0, None, 'no architecture of proxylessnas_search costs [300, inf] ms'),
    (85.0, 83.0, 'empty cost window: min_cost 85 is above max_cost 83'),
])
def test_impossible_windows_fail_at_once(setup, low, high, message):
  spec, model, context = setup
  # Were the window not checked first, 100 draws would end in another error.
  with pytest.raises(random_search.RandomSearchError,
                     match='^' + re.escape(message)):
    random_search.sample(spec, model, context, min_cost=low, max_cost=high,
                         seed=0, max_attempts=100)


def test_rare_window_stops_after_max_attempts(tiny_setup):
  spec, model, context = tiny_setup
  # Reachable (only the largest network costs this much) but rare.
  with pytest.raises(random_search.RandomSearchError) as error:
    random_search.sample(spec, model, context, min_cost=TINY_HIGH, seed=0,
                         max_attempts=3)
  rng = np.random.default_rng(0)  # The same three draws.
  costs = [model.cost(spec, architecture.canonicalize(
      spec, architecture.random_indices(spec, rng)), context)
           for _ in range(3)]
  assert str(error.value) == (
      f'found 0 of 1 architectures costing [{TINY_HIGH:g}, inf] madds in 3 '
      f'attempts; uniform samples cost {min(costs):.4g} to {max(costs):.4g} '
      f'(median {np.median(costs):.4g}): widen the window or raise '
      'max_attempts')


def test_progress_is_logged_every_few_thousand_attempts(tiny_setup, caplog,
                                                        monkeypatch):
  spec, model, context = tiny_setup
  monkeypatch.setattr(random_search, '_LOG_EVERY_ATTEMPTS', 2)
  with caplog.at_level(logging.INFO):
    with pytest.raises(random_search.RandomSearchError):
      random_search.sample(spec, model, context, min_cost=TINY_HIGH, seed=0,
                           max_attempts=5)
  progress = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith('random search:')]
  assert progress == [
      f'random search: 0 of 1 architectures in [{TINY_HIGH:g}, inf] madds '
      f'after {n} attempts' for n in (2, 4)]


@pytest.mark.parametrize('kwargs,message', [
    (dict(num_samples=0), 'num_samples must be at least 1, got 0'),
    (dict(num_samples=3, max_attempts=2),
     'max_attempts (2) must be at least num_samples (3)'),
    (dict(max_cost=float('nan')), 'max_cost must be finite, got nan'),
    (dict(min_cost=float('inf')), 'min_cost must be finite, got inf'),
    (dict(min_cost=-float('inf')), 'min_cost must be finite, got -inf'),
    # numpy's own error for these named neither the argument nor the range.
    (dict(seed=-1), 'seed must be >= 0, got -1'),
    (dict(seed=2**63), 'seed must be at most 9223372036854775807, got '
     '9223372036854775808'),
])
def test_bad_arguments(tiny_setup, kwargs, message):
  with pytest.raises(random_search.RandomSearchError,
                     match='^' + re.escape(message) + '$'):
    random_search.sample(*tiny_setup, **kwargs)


def test_max_attempts_may_equal_num_samples(tiny_setup):
  samples = random_search.sample(*tiny_setup, num_samples=2, max_attempts=2,
                                 seed=1)
  assert len(samples) == 2


def test_cost_model_must_apply(setup):
  spec, model, _ = setup
  with pytest.raises(random_search.RandomSearchError, match=re.escape(
      "cost model 'pixel1_latency' does not apply to search space "
      "'mobilenet_v3_like_search'")):
    random_search.sample(spec, model,
                         cost_models.CostContext('mobilenet_v3_like_search'))
