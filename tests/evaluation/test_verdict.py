"""Tests for tunas_search.evaluation.verdict: each branch on constructed data."""

import pytest

from tunas_search.evaluation import power
from tunas_search.evaluation import stats
from tunas_search.evaluation import verdict

RANDOM = [80.0 + 0.1 * i for i in range(12)]  # 80.0 .. 81.1, mean 80.55.


def decide(searched, random=RANDOM, **kwargs):
  args = dict(seeds=2, seed_std=0.3, architecture_std_upper=0.1)
  args.update(kwargs)
  p = stats.mann_whitney(searched, random)['p_value']
  return verdict.decide(searched, random, p_value=p, **args)


def test_searched_better():
  out = decide([82.0, 82.5, 83.0])  # Above every random one: p = 1/455.
  assert out['kind'] == verdict.SEARCHED_BETTER
  assert out['p_value'] == pytest.approx(1 / 455)
  assert out['difference']['difference'] == pytest.approx(82.5 - 80.55)
  assert out['text'].startswith('mean difference +1.95 points [')
  assert 'searched better' in out['text']


def test_random_as_good_or_better_when_powered():
  # Low noise: the design detects well under a point; searched below.
  out = decide([80.1, 80.3, 80.4])
  assert out['kind'] == verdict.RANDOM_AS_GOOD
  assert out['detectable_difference'] <= 1.0
  assert out['difference']['difference'] < 0
  assert 'random as good or better' in out['text']


def test_no_difference_larger_than_x_when_powered():
  out = decide([80.6, 80.7, 80.5])  # Ahead by 0.05 points, not significant.
  assert out['kind'] == verdict.NO_DIFFERENCE
  x = power.detectable_difference(n_searched=3, n_random=12, seeds=2,
                                  seed_std=0.3, architecture_std=0.1)
  assert out['detectable_difference'] == pytest.approx(x)
  assert f'no difference larger than {x:.2f} points (at 80% power' in (
      out['text'])


def test_undecided_names_the_design_that_would_decide():
  out = decide([80.6, 80.7, 80.5], seed_std=1.25, architecture_std_upper=0.5)
  assert out['kind'] == verdict.UNDECIDED
  needs = out['needs']
  assert needs == power.needs(1.0, n_random=12, seed_std=1.25,
                              architecture_std=0.5)
  assert (f'undecided at this budget: needs {needs["searches"]} searches x '
          f'{needs["seeds"]} seeds') in out['text']
  # A spread seeds cannot average away: more than the grid.
  out = decide([80.6, 80.7, 80.5], seed_std=1.25, architecture_std_upper=4.0)
  assert out['kind'] == verdict.UNDECIDED and out['needs'] is None
  assert 'needs more than 30 searches x 20 seeds' in out['text']


def test_undecided_before_the_spread_is_measured():
  out = decide([80.6], random=[80.0], seed_std=None)
  assert out['kind'] == verdict.UNDECIDED
  assert 'not measured yet' in out['text']
  assert out['detectable_difference'] is None


def one_seed(searched, random=RANDOM):
  return decide(searched, random, seeds=1, seed_std=None,
                architecture_std_upper=None)


def test_one_seed_powers_from_the_random_values_spread():
  # No candidate x run table: the random values' own spread (seed noise
  # included) sizes the power, with its chi-square upper bound.
  s, upper = stats.std_upper(RANDOM)
  assert s == pytest.approx(0.3606, abs=1e-4)
  # chi2_0.10(11) = 5.578 (tables): 0.3606 * sqrt(11 / 5.578).
  assert upper == pytest.approx(0.3606 * (11 / 5.578) ** 0.5, rel=1e-3)
  ten = [80.6, 80.7, 80.5, 80.4, 80.8, 80.6, 80.5, 80.6, 80.7, 80.5]
  out = one_seed(ten)
  x = power.detectable_difference(n_searched=10, n_random=12, seeds=1,
                                  seed_std=0.0, architecture_std=upper)
  assert out['kind'] == verdict.NO_DIFFERENCE
  assert out['spread_source'] == 'random_values'
  assert out['detectable_difference'] == pytest.approx(x) and x < 1.0
  assert out['random_values_std_upper'] == pytest.approx(upper)
  assert f'no difference larger than {x:.2f} points' in out['text']
  assert "power from the 12 random values' spread: 0.36 points" in (
      out['text'])
  below = one_seed([v - 0.3 for v in ten])
  assert below['kind'] == verdict.RANDOM_AS_GOOD
  # Wider random values: undecided, and the design it names adds searches,
  # never seeds (one seed cannot say how much more seeds would remove).
  wide = [80.0 + 0.2 * i for i in range(12)]
  out = one_seed([81.1, 81.2, 81.0], wide)
  assert out['kind'] == verdict.UNDECIDED
  needs = out['needs']
  assert needs == power.needs(1.0, n_random=12, seed_std=0.0,
                              architecture_std=stats.std_upper(wide)[1])
  assert needs['seeds'] == 1 and needs['searches'] > 3
  assert f'needs {needs["searches"]} searches x 1 seed (with 12' in (
      out['text'])
  assert out['text'].endswith('so more seeds are counted as no help)')
  # Beyond the grid it names searches only, never a number of seeds.
  wider = [80.0 + 0.8 * i for i in range(12)]
  out = one_seed([81.1, 81.2, 81.0], wider)
  assert out['kind'] == verdict.UNDECIDED and out['needs'] is None
  assert 'needs more than 30 searches at 1 seed (the architectures' in (
      out['text'])
  assert 'x 20 seeds' not in out['text']
  # A measured run table wins over the values' spread.
  assert decide(ten)['spread_source'] == 'run_table'


def test_each_text_holds_exactly_one_verdict():
  phrases = ('searched better', 'random as good or better',
             'no difference larger than', 'undecided at this budget')
  for out in (decide([82.0, 82.5, 83.0]), decide([80.1, 80.3, 80.4]),
              decide([80.6, 80.7, 80.5]),
              decide([80.6, 80.7, 80.5], seed_std=1.25)):
    assert sum(p in out['text'] for p in phrases) == 1
    assert out['kind'] in verdict.KINDS
