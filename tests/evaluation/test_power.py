"""Tests for tunas_search.evaluation.power: the exact null distribution by
enumeration, and power checked against a direct simulation of the test."""

import itertools
import math

import numpy as np
import pytest

from tunas_search.evaluation import power
from tunas_search.evaluation import stats


@pytest.mark.parametrize('n_a,n_b', [(1, 4), (2, 5), (3, 12), (4, 4)])
def test_null_tail_matches_enumeration(n_a, n_b):
  ranks = np.arange(1, n_a + n_b + 1)
  u = np.array([sum(c) - n_a * (n_a + 1) / 2
                for c in itertools.combinations(ranks, n_a)])
  expected = [np.mean(u >= v) for v in range(n_a * n_b + 1)]
  np.testing.assert_allclose(power.u_null_tail(n_a, n_b), expected,
                             atol=1e-12)


def test_critical_u_agrees_with_the_reported_p_value():
  # 3 vs 12: U >= 30 has p = 23/455 = 0.0505 > 0.05, U >= 31 has 16/455.
  assert power.critical_u(3, 12) == 31
  a, b = [20.0, 21.0, 6.5], list(range(12))  # U = 12 + 12 + 7 = 31.
  assert stats.mann_whitney(a, b)['u'] == 31
  assert stats.mann_whitney(a, b)['p_value'] == pytest.approx(16 / 455)
  # One search among 12 random ones can never reach 5%.
  assert power.critical_u(1, 12) is None
  assert power.power(10.0, n_searched=1, n_random=12, seeds=2, seed_std=1.0,
                     architecture_std=0.0) == 0.0
  assert math.isinf(power.detectable_difference(
      n_searched=1, n_random=12, seeds=2, seed_std=1.0, architecture_std=0.0))


def test_power_matches_a_direct_simulation_of_the_exact_test():
  # Independent of the trick: draw the groups, run stats.mann_whitney.
  rng = np.random.default_rng(5)
  seed_std, arch, seeds, difference = 1.25, 0.3, 2, 1.41
  sd = math.sqrt(arch ** 2 + seed_std ** 2 / seeds)
  rejections = [stats.mann_whitney(rng.normal(difference, sd, 3),
                                    rng.normal(0, sd, 12))['p_value'] <= 0.05
                for _ in range(1500)]
  simulated = power.power(difference, n_searched=3, n_random=12, seeds=seeds,
                          seed_std=seed_std, architecture_std=arch)
  # 1,500 direct draws: SE 0.0125; 4,000 simulated: 0.0076; 3 SE of both.
  assert simulated == pytest.approx(np.mean(rejections), abs=0.045)


def test_the_issues_numbers():
  # 3 vs 12, 2 seeds of 1.25 points, equal architectures: the normal
  # approximation's "1.41 points at 80%" is detected about 65% of the time.
  design = dict(n_searched=3, n_random=12, seed_std=1.25,
                architecture_std=0.0)
  assert power.power(1.41, seeds=2, **design) == pytest.approx(0.65,
                                                              abs=0.03)
  detectable = power.detectable_difference(seeds=2, **design)
  assert 1.6 < detectable < 1.9
  assert power.power(detectable + 1e-9, seeds=2, **design) >= 0.8
  # One point: 5 seeds are not enough.
  assert power.power(1.0, seeds=5, **design) < 0.78


def test_needs_prefers_searches_when_architectures_scatter():
  quiet = power.needs(1.0, n_random=12, seed_std=1.25, architecture_std=0.0)
  assert quiet['power'] >= 0.8
  spread = power.needs(1.0, n_random=12, seed_std=1.25, architecture_std=0.6)
  assert spread['searches'] > quiet['searches']
  assert spread['power'] >= 0.8
  # The chosen design is the cheapest of the grid that reaches 80%.
  for n in range(1, spread['searches']):
    for k in range(1, 21):
      cost = n * power.SEARCH_COST_IN_TRAININGS + (n + 12) * k
      if cost < spread['cost_in_trainings']:
        assert power.power(1.0, n_searched=n, n_random=12, seeds=k,
                           seed_std=1.25, architecture_std=0.6) < 0.8
  assert power.needs(1.0, n_random=12, seed_std=1.25, architecture_std=3.0,
                     max_searches=5) is None


def test_needs_also_chooses_the_random_candidates():
  fixed = power.needs(1.0, n_random=12, seed_std=1.25, architecture_std=0.3)
  free = power.needs(1.0, n_random=[4, 12, 30], seed_std=1.25,
                     architecture_std=0.3)
  assert fixed['random'] == 12 and free['random'] in (4, 12, 30)
  assert free['cost_in_trainings'] <= fixed['cost_in_trainings']
  assert free['power'] >= 0.8


def test_seeded_and_repeatable():
  args = dict(n_searched=4, n_random=10, seeds=3, seed_std=1.0,
              architecture_std=0.5)
  assert power.power(1.0, seed=3, **args) == power.power(1.0, seed=3, **args)
  assert power.power(1.0, seed=3, **args) != power.power(1.0, seed=4, **args)
