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


def test_undecided_before_the_noise_is_measured():
  out = decide([80.6], seed_std=None)
  assert out['kind'] == verdict.UNDECIDED
  assert 'not measured yet' in out['text']
  assert out['detectable_difference'] is None


def test_each_text_holds_exactly_one_verdict():
  phrases = ('searched better', 'random as good or better',
             'no difference larger than', 'undecided at this budget')
  for out in (decide([82.0, 82.5, 83.0]), decide([80.1, 80.3, 80.4]),
              decide([80.6, 80.7, 80.5]),
              decide([80.6, 80.7, 80.5], seed_std=1.25)):
    assert sum(p in out['text'] for p in phrases) == 1
    assert out['kind'] in verdict.KINDS
