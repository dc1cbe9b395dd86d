"""Tests for tunas_search.evaluation.stats against values computed by hand.

No TensorFlow: the statistics are plain numpy (checked at the end).
"""

import math
import subprocess
import sys

import numpy as np
import pytest

from tunas_search.evaluation import stats


def test_rankdata_averages_ties():
  np.testing.assert_array_equal(stats.rankdata([10, 30, 20, 30, 5]),
                                [2, 4.5, 3, 4.5, 1])


def test_kendall_tau_b_with_ties_by_hand():
  # Pairs of x=[1,2,2,3], y=[1,3,2,2]: (0,1) (0,2) (0,3) concordant, (1,3)
  # discordant, (1,2) tied in x, (2,3) tied in y: (3-1)/sqrt(5*5).
  assert stats.kendall_tau_b([1, 2, 2, 3], [1, 3, 2, 2]) == pytest.approx(0.4)


def test_kendall_tau_b_extremes_and_undefined():
  assert stats.kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
  assert stats.kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
  assert math.isnan(stats.kendall_tau_b([1, 1, 1], [1, 2, 3]))
  assert math.isnan(stats.kendall_tau_b([1], [2]))
  with pytest.raises(ValueError, match='one length'):
    stats.kendall_tau_b([1, 2], [1, 2, 3])


def test_spearman_with_average_ranks_by_hand():
  # Ranks x [1, 2.5, 2.5, 4], y [1, 4, 2.5, 2.5]; centred products sum to
  # 2.25 over sqrt(4.5 * 4.5).
  assert stats.spearman_rho([1, 2, 2, 3], [1, 3, 2, 2]) == pytest.approx(0.5)
  assert stats.spearman_rho([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  assert math.isnan(stats.spearman_rho([2, 2, 2], [1, 2, 3]))


def test_percentile_rank_and_rank_test_by_hand():
  population = [0.80, 0.85, 0.90, 0.70]
  # Two below, one tie (half): 2.5 of 4.
  assert stats.percentile(0.85, population) == pytest.approx(62.5)
  assert stats.rank_among(0.85, population) == 2
  assert stats.rank_among(0.95, population) == 1
  # 0.85 and 0.90 are at or above: (1 + 2) / (4 + 1).
  assert stats.rank_test_p_value(0.85, population) == pytest.approx(0.6)
  # Best of 12: the smallest p-value 12 random ones allow.
  assert stats.rank_test_p_value(1.0, np.linspace(0, 0.9, 12)) == (
      pytest.approx(1 / 13))


def test_mann_whitney_exact_by_hand():
  # U: 3 beats 1 and 2, 5 beats all three: 5 of 6 pairs. Of the 10 ways to
  # pick 2 of the 5 ranks, rank sums {3,5} and {4,5} reach U >= 5.
  out = stats.mann_whitney([3, 5], [1, 2, 4])
  assert out['u'] == 5
  assert out['probability_of_superiority'] == pytest.approx(5 / 6)
  assert out['p_value'] == pytest.approx(0.2)
  assert out['exact'] == 1.0


def test_mann_whitney_ties_count_half():
  # 2 beats 1 twice, ties 2 twice: U = 3 of 4. Pooled ranks [3, 3, 1, 3]:
  # 3 of the 6 splits have U = 3, the others U = 1.
  out = stats.mann_whitney([2, 2], [1, 2])
  assert out['u'] == 3
  assert out['probability_of_superiority'] == pytest.approx(0.75)
  assert out['p_value'] == pytest.approx(0.5)


def test_mann_whitney_monte_carlo_close_to_exact(monkeypatch):
  rng = np.random.default_rng(0)
  a, b = rng.normal(0.5, 1, 6), rng.normal(0, 1, 14)
  exact = stats.mann_whitney(a, b)
  monkeypatch.setattr(stats, 'MAX_EXACT_SPLITS', 10)
  monkeypatch.setattr(stats, 'MONTE_CARLO_SPLITS', 20000)
  estimate = stats.mann_whitney(a, b, seed=1)
  assert exact['exact'] == 1.0 and estimate['exact'] == 0.0
  assert estimate['u'] == exact['u']
  # 20,000 splits: the estimate's standard error is below 0.004.
  assert estimate['p_value'] == pytest.approx(exact['p_value'], abs=0.015)
  assert estimate == stats.mann_whitney(a, b, seed=1)


def test_mann_whitney_empty_group():
  out = stats.mann_whitney([], [1, 2])
  assert math.isnan(out['p_value']) and out['n_b'] == 2


def test_summary_and_pooled_seed_std_by_hand():
  assert stats.summary([0.8, 0.9]) == {
      'n': 2, 'mean': pytest.approx(0.85), 'std': pytest.approx(0.0707107),
      'min': 0.8, 'max': 0.9}
  assert stats.summary([0.8])['std'] is None
  assert stats.summary([])['mean'] is None
  # Squares 0.0002 + 0.0008 over 1 + 2 degrees of freedom.
  assert stats.pooled_seed_std([[0.80, 0.82], [0.90, 0.86, 0.88], [0.5]]) == (
      pytest.approx(math.sqrt(0.001 / 3)))
  assert stats.pooled_seed_std([[0.5], [0.6]]) is None


def test_seed_vs_seed_tau_by_hand():
  # Seed 0 ranks 1<2<3<4; seed 1 swaps the middle two: 5 C, 1 D.
  runs = [[1, 1.1], [2, 2.5], [3, 2.0], [4, 4.2], [9]]
  assert stats.seed_vs_seed_tau(runs) == pytest.approx(4 / 6)
  assert stats.seed_vs_seed_tau([[1], [2], [3]]) is None


def test_f_and_t_quantiles_against_tables():
  # Tables: F_0.95(1, 10) = 4.965, F_0.90(11, 11) = 2.227 (so its 0.10
  # quantile is 1 / 2.227), t_0.975(13) = 2.160, t_0.975(1) = 12.706.
  assert stats.f_quantile(0.95, 1, 10) == pytest.approx(4.965, abs=2e-3)
  assert stats.f_quantile(0.10, 11, 11) == pytest.approx(1 / 2.227, abs=1e-3)
  assert stats.t_quantile(0.975, 13) == pytest.approx(2.160, abs=1e-3)
  assert stats.t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-2)
  assert stats.f_cdf(0.0, 3, 4) == 0.0


def test_chi2_quantiles_against_tables_and_std_upper_covers():
  # Tables: chi2_0.10(19) = 11.651, chi2_0.05(10) = 3.940,
  # chi2_0.10(1) = 0.01579, chi2_0.90(4) = 7.779.
  assert stats.chi2_quantile(0.10, 19) == pytest.approx(11.651, abs=2e-3)
  assert stats.chi2_quantile(0.05, 10) == pytest.approx(3.940, abs=2e-3)
  assert stats.chi2_quantile(0.10, 1) == pytest.approx(0.01579, abs=1e-4)
  assert stats.chi2_quantile(0.90, 4) == pytest.approx(7.779, abs=2e-3)
  assert stats.std_upper([80.0]) is None
  s, upper = stats.std_upper([1.0, 2.0, 3.0, 4.0])
  assert s == pytest.approx(1.2910, abs=1e-4)
  assert upper == pytest.approx(s * (3 / stats.chi2_quantile(0.1, 3)) ** 0.5)
  # Coverage of the 90% bound for 20 one-seed values (the powered design's
  # random group), 1,000 seeded draws: nominal 0.90 +-0.0095 (1 SE); 3 SE
  # either side, so a bound too loose (e.g. at 95%) fails as well.
  rng = np.random.default_rng(2)
  covered = sum(stats.std_upper(rng.normal(80.0, 0.8, 20))[1] >= 0.8
                for _ in range(1000))
  assert 0.87 <= covered / 1000 <= 0.93


def test_mean_difference_t_interval_by_hand():
  # a = [3, 5] (mean 4), b = [1, 2, 3] (mean 2): squares 2 + 2 over 3 dof,
  # half-width t_0.975(3) = 3.1824 x sqrt(4/3) x sqrt(1/2 + 1/3).
  out = stats.mean_difference([3, 5], [1, 2, 3])
  half = 3.1824 * math.sqrt(4 / 3) * math.sqrt(5 / 6)
  assert out['difference'] == pytest.approx(2.0)
  assert (out['low'], out['high']) == (pytest.approx(2 - half, abs=1e-3),
                                       pytest.approx(2 + half, abs=1e-3))
  assert stats.mean_difference([1], [2])['low'] is None
  assert stats.mean_difference([], [2])['difference'] is None


def test_two_way_by_hand():
  # Rows 1, 2, 4 plus run effects 0 and +1, and a residual of +-0.5 on the
  # last row: candidate means 1.5, 2.5, 4.5; run means 2.5, 19/6.
  y = [[1.0, 2.0], [2.0, 3.0], [4.5, 4.5]]
  d = stats.two_way(y)
  # Residuals: rows 0 and 1 -1/6, +1/6; row 2 +1/3, -1/3: squares 1/3 over
  # (3-1)(2-1) = 2 dof.
  assert d.ms_residual == pytest.approx(1 / 6)
  assert d.seed_std == pytest.approx(math.sqrt(1 / 6))
  # MS_runs = 3 x 2 x (1/3)^2 / 1 = 2/3; (2/3 - 1/6) / 3.
  assert d.run_std == pytest.approx(math.sqrt((2 / 3 - 1 / 6) / 3))
  # MS_c = 2 x var(1.5, 2.5, 4.5) = 2 x 7/3.
  assert d.ms_population == pytest.approx(14 / 3)
  assert d.architecture_std == pytest.approx(math.sqrt((14 / 3 - 1 / 6) / 2))
  upper = (14 / 3 / stats.f_quantile(0.1, 2, 2) - 1 / 6) / 2
  assert d.architecture_std_upper == pytest.approx(math.sqrt(upper))
  # The spread of the first two rows only: MS_c = 2 x 0.5.
  d = stats.two_way(y, population=[0, 1])
  assert d.architecture_std == pytest.approx(math.sqrt((1 - 1 / 6) / 2))
  assert stats.two_way([[1.0], [2.0]]) is None
  assert stats.two_way([[1.0, 2.0]]) is None


def test_two_way_removes_the_shared_run_effect():
  # Equal architectures, a large effect of the shared run seed: a pooled
  # within-candidate std would read the run effect as seed noise.
  rng = np.random.default_rng(0)
  y = rng.normal(0, 0.1, (12, 3)) + np.array([0.0, 2.0, -2.0])
  d = stats.two_way(y)
  assert d.seed_std == pytest.approx(0.1, rel=0.3)
  assert d.run_std == pytest.approx(2.0, rel=0.1)
  assert stats.pooled_seed_std(y) > 10 * d.seed_std


def test_spread_upper_bound_covers_and_zero_is_not_a_measurement():
  # The design the issue names: 15 candidates, 12 of them random, 2 runs,
  # seed noise 1.25 points. 1,000 seeded evaluations per true spread.
  rng = np.random.default_rng(1)
  for true in (0.0, 0.9):
    covered = zeros = 0
    for _ in range(1000):
      y = (rng.normal(0, true, 15)[:, None] + rng.normal(0, 0.5, 2)
           + rng.normal(0, 1.25, (15, 2)))
      d = stats.two_way(y, population=range(3, 15))
      covered += d.architecture_std_upper >= true
      zeros += d.architecture_std == 0
    # Nominal 90%; 1,000 draws: +-0.0095 (1 SE), so 3 SE below is 0.87.
    assert covered / 1000 >= 0.87
    # The floored estimate reads 0 often even when the spread is 0.9.
    assert zeros / 1000 > (0.4 if true == 0 else 0.05)


def test_reliability_and_tau_ceiling_by_hand():
  # a = 1, s = 1: one seed 1/2, two seeds 2/3 (Spearman-Brown 2 x 0.5 / 1.5).
  assert stats.reliability(1.0, 1.0, 1) == pytest.approx(0.5)
  assert stats.reliability(1.0, 1.0, 2) == pytest.approx(2 / 3)
  # r = sqrt(1/2): tau = (2/pi) asin(0.7071) = 0.5.
  assert stats.tau_ceiling(1.0, 1.0, 1) == pytest.approx(0.5)
  assert stats.tau_ceiling(0.0, 1.0, 2) == 0.0
  assert stats.tau_ceiling(0.0, 0.0, 2) is None


def test_bootstrap_interval_seeded_and_bracketing():
  rng = np.random.default_rng(3)
  x = rng.normal(size=20)
  y = x + rng.normal(scale=0.5, size=20)
  first = stats.bootstrap_interval(stats.kendall_tau_b, x, y,
                                   num_resamples=500, seed=7)
  assert first == stats.bootstrap_interval(stats.kendall_tau_b, x, y,
                                           num_resamples=500, seed=7)
  assert first != stats.bootstrap_interval(stats.kendall_tau_b, x, y,
                                           num_resamples=500, seed=8)
  tau = stats.kendall_tau_b(x, y)
  assert -1 <= first[0] < tau < first[1] <= 1
  # Perfect agreement: every defined resample agrees perfectly.
  assert stats.bootstrap_interval(stats.spearman_rho, [1, 2, 3, 4],
                                  [2, 4, 6, 8], num_resamples=200,
                                  seed=0) == (1.0, 1.0)
  assert all(math.isnan(v) for v in stats.bootstrap_interval(
      stats.spearman_rho, [1, 2], [1, 2], num_resamples=10, seed=0))
  assert stats.interval_list((float('nan'), 0.5)) == [None, 0.5]


def test_no_tensorflow():
  code = ('import sys; from tunas_search.evaluation import stats, candidates; '
          'assert "tensorflow" not in sys.modules')
  subprocess.run([sys.executable, '-c', code], check=True)
