"""The statistics of a search evaluation, in plain numpy (no TensorFlow, no scipy).

Rank correlations (Kendall's tau-b with ties, Spearman's rho on average
ranks) with seeded percentile-bootstrap intervals, where a value stands among
a population (rank, mid-rank percentile, a one-sided rank test), the
Mann-Whitney comparison of two groups (probability of superiority and its
one-sided p-value), the two-way decomposition of repeated trainings
(candidate x run) into seed noise, run effect and the architectures' spread
with an upper confidence bound, and the rank correlation a perfect
predictor could reach against means of k seeds. The F and t quantiles are
computed by numerical integration. Power and sample sizes are simulated in
`power`. The tests check each against values computed by hand.
"""

import dataclasses
import functools
import itertools
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

# Above this many ways to split the pooled values, the Mann-Whitney p-value
# is estimated from seeded random splits instead of enumerated.
MAX_EXACT_SPLITS = 200000
MONTE_CARLO_SPLITS = 100000


def rankdata(values: Sequence[float]) -> np.ndarray:
  """1-based ranks, smallest first; tied values share their average rank."""
  x = np.asarray(values, dtype=np.float64)
  order = np.argsort(x, kind='mergesort')
  ranks = np.empty(len(x), dtype=np.float64)
  i = 0
  while i < len(x):
    j = i
    while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
      j += 1
    ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
    i = j + 1
  return ranks


def _pairs(x: Sequence[float], y: Sequence[float]
           ) -> Tuple[np.ndarray, np.ndarray]:
  x = np.asarray(x, dtype=np.float64)
  y = np.asarray(y, dtype=np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise ValueError(f'need two 1-D sequences of one length, got shapes '
                     f'{x.shape} and {y.shape}')
  return x, y


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
  """Kendall's tau-b: (C - D) / sqrt((n0 - n1) (n0 - n2)).

  C and D count concordant and discordant pairs, n0 = n(n-1)/2 and n1, n2
  the pairs tied in x and in y (Kendall 1945). NaN when fewer than two
  pairs or when either sequence is constant.
  """
  x, y = _pairs(x, y)
  n = len(x)
  if n < 2:
    return float('nan')
  i, j = np.triu_indices(n, k=1)
  dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
  n0 = len(i)
  ties_x, ties_y = int(np.sum(dx == 0)), int(np.sum(dy == 0))
  denominator = math.sqrt((n0 - ties_x) * (n0 - ties_y))
  if denominator == 0:
    return float('nan')
  return float(np.sum(dx * dy)) / denominator


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
  """Pearson's correlation of the average ranks; NaN if either is constant."""
  x, y = _pairs(x, y)
  if len(x) < 2:
    return float('nan')
  rx, ry = rankdata(x), rankdata(y)
  rx, ry = rx - rx.mean(), ry - ry.mean()
  denominator = math.sqrt(float(np.sum(rx * rx) * np.sum(ry * ry)))
  if denominator == 0:
    return float('nan')
  return float(np.sum(rx * ry)) / denominator


def bootstrap_interval(statistic: Callable[[np.ndarray, np.ndarray], float],
                       x: Sequence[float], y: Sequence[float], *,
                       num_resamples: int, seed: int,
                       level: float = 0.95) -> Tuple[float, float]:
  """Percentile bootstrap interval of a paired statistic (Efron 1979).

  Pairs are resampled with replacement; resamples where the statistic is
  undefined (NaN, e.g. all x tied) are left out. The same seed gives the
  same interval.

  Returns:
    (low, high), or (NaN, NaN) with fewer than three pairs or when no
    resample is defined.
  """
  x, y = _pairs(x, y)
  if len(x) < 3:
    return float('nan'), float('nan')
  rng = np.random.default_rng(seed)
  values = []
  for _ in range(num_resamples):
    pick = rng.integers(0, len(x), len(x))
    value = statistic(x[pick], y[pick])
    if not math.isnan(value):
      values.append(value)
  if not values:
    return float('nan'), float('nan')
  tail = 100.0 * (1.0 - level) / 2.0
  low, high = np.percentile(values, [tail, 100.0 - tail])
  return float(low), float(high)


def rank_among(value: float, population: Sequence[float]) -> int:
  """1 + how many of `population` are above `value`: 1 is the best."""
  return 1 + int(np.sum(np.asarray(population, dtype=np.float64) > value))


def percentile(value: float, population: Sequence[float]) -> float:
  """Mid-rank percentile: 100 x (below + ties / 2) / n, in [0, 100].

  Read as the chance (in %) that `value` beats a member of `population`
  drawn at random, a tie counting half.
  """
  p = np.asarray(population, dtype=np.float64)
  if p.size == 0:
    return float('nan')
  below, ties = np.sum(p < value), np.sum(p == value)
  return float(100.0 * (below + 0.5 * ties) / p.size)


def rank_test_p_value(value: float, population: Sequence[float]) -> float:
  """One-sided p-value that `value` is no better than a random member.

  Under the null hypothesis `value` is one more draw from the population's
  distribution, so its rank among all n + 1 values is uniform: p = (1 +
  members at or above it) / (n + 1). Ties count against `value`
  (conservative). With n members the smallest p-value is 1 / (n + 1).
  """
  p = np.asarray(population, dtype=np.float64)
  return float((1 + np.sum(p >= value)) / (p.size + 1))


def mann_whitney(a: Sequence[float], b: Sequence[float], *,
                 seed: int = 0) -> Dict[str, float]:
  """Whether group `a` tends to beat group `b` (Mann and Whitney 1947).

  The statistic U counts pairs (a_i, b_j) with a_i > b_j (ties half), i.e.
  the sum of a's average ranks in the pooled values less n_a(n_a+1)/2; the
  probability of superiority is U / (n_a n_b), the chance that a random
  member of `a` beats one of `b`. The one-sided p-value is the chance that
  a random split of the pooled values into groups of these sizes gives a
  U at least as large: exact (every split enumerated, ties handled) up to
  MAX_EXACT_SPLITS splits, else estimated from MONTE_CARLO_SPLITS seeded
  splits as (hits + 1) / (splits + 1).

  Returns:
    {'u', 'probability_of_superiority', 'p_value', 'n_a', 'n_b', 'exact'}
    (exact 1.0 or 0.0); NaN statistics when a group is empty.
  """
  a = np.asarray(a, dtype=np.float64)
  b = np.asarray(b, dtype=np.float64)
  out = {'n_a': float(a.size), 'n_b': float(b.size)}
  if a.size == 0 or b.size == 0:
    return dict(out, u=float('nan'), probability_of_superiority=float('nan'),
                p_value=float('nan'), exact=float('nan'))
  ranks = rankdata(np.concatenate([a, b]))
  offset = a.size * (a.size + 1) / 2.0
  u = float(ranks[:a.size].sum() - offset)
  n = ranks.size
  exact = math.comb(n, a.size) <= MAX_EXACT_SPLITS
  if exact:
    chosen = np.array(list(itertools.combinations(range(n), a.size)),
                      dtype=np.int64).reshape(-1, a.size)
  else:
    rng = np.random.default_rng(seed)
    chosen = np.argsort(rng.random((MONTE_CARLO_SPLITS, n)), axis=1)[:, :a.size]
  # Rank sums are multiples of 0.5: the tolerance only absorbs rounding.
  hits = int(np.sum(ranks[chosen].sum(axis=1) - offset >= u - 1e-9))
  p_value = hits / len(chosen) if exact else (hits + 1) / (len(chosen) + 1)
  return dict(out, u=u, probability_of_superiority=u / (a.size * b.size),
              p_value=float(p_value), exact=float(exact))


def summary(values: Sequence[float]) -> Dict[str, Optional[float]]:
  """n, mean, sample standard deviation (None below 2), min and max."""
  v = np.asarray(values, dtype=np.float64)
  if v.size == 0:
    return {'n': 0, 'mean': None, 'std': None, 'min': None, 'max': None}
  return {'n': int(v.size), 'mean': float(v.mean()),
          'std': float(v.std(ddof=1)) if v.size > 1 else None,
          'min': float(v.min()), 'max': float(v.max())}


def pooled_seed_std(groups: Sequence[Sequence[float]]) -> Optional[float]:
  """The seed noise: sqrt of the pooled within-group variance.

  sum over groups of sum (x - group mean)^2, over sum of (size - 1); groups
  of one value add nothing. None when no group has two values.
  """
  squares, dof = 0.0, 0
  for g in groups:
    g = np.asarray(g, dtype=np.float64)
    if g.size > 1:
      squares += float(np.sum((g - g.mean()) ** 2))
      dof += g.size - 1
  return math.sqrt(squares / dof) if dof else None


def seed_vs_seed_tau(runs: Sequence[Sequence[float]]) -> Optional[float]:
  """Kendall's tau-b between seeds: how well single trainings agree.

  Not the ceiling of a correlation with means of several seeds, which are
  more reliable than single runs (`tau_ceiling`).

  Args:
    runs: per candidate, its accuracies in seed order.

  Returns:
    The mean over every pair of seed positions (s, t) of tau-b between the
    candidates' s-th and t-th runs, over the candidates that have both;
    None when no pair has three or more candidates.
  """
  width = max((len(r) for r in runs), default=0)
  taus = []
  for s, t in itertools.combinations(range(width), 2):
    both = [(r[s], r[t]) for r in runs if len(r) > t]
    if len(both) >= 3:
      tau = kendall_tau_b([p[0] for p in both], [p[1] for p in both])
      if not math.isnan(tau):
        taus.append(tau)
  return float(np.mean(taus)) if taus else None



def _simpson(f: Callable[[np.ndarray], np.ndarray], high: float,
             points: int = 4001) -> float:
  """The integral of f over [0, high] by Simpson's rule (`points` odd)."""
  u = np.linspace(0.0, high, points)
  w = np.ones(points)
  w[1:-1:2], w[2:-1:2] = 4.0, 2.0
  return float(np.sum(w * f(u)) * (high / (points - 1)) / 3.0)


def _bisect(cdf: Callable[[float], float], q: float, low: float,
            high: float) -> float:
  while cdf(high) < q:
    high *= 2.0
  for _ in range(80):
    middle = 0.5 * (low + high)
    low, high = (middle, high) if cdf(middle) < q else (low, middle)
  return 0.5 * (low + high)


def f_cdf(x: float, d1: int, d2: int) -> float:
  """P(F <= x) for Snedecor's F with (d1, d2) degrees of freedom.

  The density in u = sqrt(x), which removes the pole at 0 for d1 = 1:
  2 u f(u^2), f(x) = (d1/d2)^(d1/2) x^(d1/2-1) (1 + d1 x/d2)^(-(d1+d2)/2)
  / B(d1/2, d2/2).
  """
  if x <= 0:
    return 0.0
  log_c = (0.5 * d1 * math.log(d1 / d2) - math.lgamma(0.5 * d1)
           - math.lgamma(0.5 * d2) + math.lgamma(0.5 * (d1 + d2)))

  def density(u):
    return 2.0 * np.exp(log_c + (d1 - 1) * np.log(np.maximum(u, 1e-300))
                        - 0.5 * (d1 + d2) * np.log1p(d1 * u * u / d2))
  return min(1.0, _simpson(density, math.sqrt(x)))


@functools.lru_cache(maxsize=256)
def f_quantile(q: float, d1: int, d2: int) -> float:
  """The q-quantile of F(d1, d2), by bisection of `f_cdf`."""
  return _bisect(lambda x: f_cdf(x, d1, d2), q, 0.0, 4.0)


def chi2_cdf(x: float, dof: int) -> float:
  """P(X <= x) for the chi-square distribution with `dof` degrees of
  freedom; the density in u = sqrt(x): 2 u^(dof-1) exp(-u^2/2) /
  (2^(dof/2) Gamma(dof/2)), finite at 0 for every dof >= 1."""
  if x <= 0:
    return 0.0
  log_c = math.log(2.0) - 0.5 * dof * math.log(2.0) - math.lgamma(0.5 * dof)

  def density(u):
    return np.exp(log_c + (dof - 1) * np.log(np.maximum(u, 1e-300))
                  - 0.5 * u * u)
  return min(1.0, _simpson(density, math.sqrt(x)))


@functools.lru_cache(maxsize=256)
def chi2_quantile(q: float, dof: int) -> float:
  """The q-quantile of chi-square(dof), by bisection of `chi2_cdf`."""
  return _bisect(lambda x: chi2_cdf(x, dof), q, 0.0, 4.0)


@functools.lru_cache(maxsize=256)
def t_quantile(q: float, dof: int) -> float:
  """The q-quantile (q >= 0.5) of Student's t with `dof` degrees of freedom."""
  log_c = (math.lgamma(0.5 * (dof + 1)) - math.lgamma(0.5 * dof)
           - 0.5 * math.log(dof * math.pi))

  def cdf(x):
    return 0.5 + _simpson(lambda u: np.exp(
        log_c - 0.5 * (dof + 1) * np.log1p(u * u / dof)), x)
  return _bisect(cdf, q, 0.0, 4.0)


def mean_difference(a: Sequence[float], b: Sequence[float],
                    level: float = 0.95) -> Dict[str, Optional[float]]:
  """mean(a) - mean(b) with its two-sided pooled-variance t interval.

  The interval is difference +- t_{(1+level)/2, na+nb-2} s_p sqrt(1/na +
  1/nb), s_p^2 the pooled sample variance (Student 1908): both groups are
  candidates whose values scatter alike (architecture spread and the seed
  noise of a k-seed mean). None for the interval below three values or
  with a group of one value and nothing else to pool.
  """
  a = np.asarray(a, dtype=np.float64)
  b = np.asarray(b, dtype=np.float64)
  out = {'difference': None, 'low': None, 'high': None, 'level': level}
  if a.size == 0 or b.size == 0:
    return out
  out['difference'] = float(a.mean() - b.mean())
  dof = a.size + b.size - 2
  if dof < 1:
    return out
  pooled = (np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2)) / dof
  half = (t_quantile(0.5 + level / 2, dof) * math.sqrt(pooled)
          * math.sqrt(1 / a.size + 1 / b.size))
  out['low'], out['high'] = out['difference'] - half, out['difference'] + half
  return out


# One-sided level of the upper confidence bound on the architectures' spread.
SPREAD_BOUND_LEVEL = 0.9


@dataclasses.dataclass(frozen=True)
class Decomposition:
  """Repeated trainings split into their sources (`two_way`).

  Attributes:
    candidates, runs: the table's size (every candidate has every run).
    seed_std: the noise of one training, from the residual.
    run_std: the effect shared by run r of every candidate (its seed's data
      order and augmentation), floored at 0.
    architecture_std: the spread of the population's true accuracies,
      floored at 0 (a point estimate; 0 is not a measurement of 0).
    architecture_std_upper: its one-sided `level` upper confidence bound.
    level: that level.
    population: rows whose spread is measured.
    ms_population, ms_residual, dof_population, dof_residual: the mean
      squares and degrees of freedom the estimates come from.
  """
  candidates: int
  runs: int
  seed_std: float
  run_std: float
  architecture_std: float
  architecture_std_upper: float
  level: float
  population: int
  ms_population: float
  ms_residual: float
  dof_population: int
  dof_residual: int


def two_way(table: Any, population: Optional[Sequence[int]] = None,
            level: float = SPREAD_BOUND_LEVEL) -> Optional[Decomposition]:
  """Candidate x run decomposition of trainings that share run seeds.

  Run r of every candidate uses the same seed, so y_ij = mu + a_i + r_j +
  e_ij (two-way, no replication). The residual mean square estimates the
  seed noise sigma_e^2 free of the run effect; the mean square of the
  population's candidate means, MS_c = k var(row means), has expectation
  k sigma_a^2 + sigma_e^2 (the run effect cancels between candidates), so
  sigma_a^2 = (MS_c - MS_e) / k. Its upper bound inverts the exact F
  distribution of MS_c / MS_e ~ (1 + k sigma_a^2 / sigma_e^2) F(c-1,
  dof_e): sigma_a^2 <= (MS_c / F_{1-level}(c-1, dof_e) - MS_e) / k, with
  MS_e in place of sigma_e^2 (its coverage is checked by simulation in
  tests/evaluation/test_stats.py).

  Args:
    table: candidates x runs (c >= 2 rows, k >= 2 columns).
    population: the rows whose spread is wanted (default all; at least 2).
    level: one-sided level of the upper bound.

  Returns:
    The decomposition, or None for a table too small.
  """
  y = np.asarray(table, dtype=np.float64)
  rows = list(range(y.shape[0])) if population is None else list(population)
  if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2 or len(rows) < 2:
    return None
  c, k = y.shape
  grand = y.mean()
  row, col = y.mean(axis=1), y.mean(axis=0)
  dof_e = (c - 1) * (k - 1)
  ms_e = float(np.sum((y - row[:, None] - col[None, :] + grand) ** 2)) / dof_e
  ms_r = c * float(np.sum((col - grand) ** 2)) / (k - 1)
  ms_c = k * float(np.var(row[rows], ddof=1))
  bound = ms_c / f_quantile(1.0 - level, len(rows) - 1, dof_e) - ms_e
  return Decomposition(
      candidates=c, runs=k, seed_std=math.sqrt(ms_e),
      run_std=math.sqrt(max(0.0, (ms_r - ms_e) / c)),
      architecture_std=math.sqrt(max(0.0, (ms_c - ms_e) / k)),
      architecture_std_upper=math.sqrt(max(0.0, bound / k)), level=level,
      population=len(rows), ms_population=ms_c, ms_residual=ms_e,
      dof_population=len(rows) - 1, dof_residual=dof_e)


def std_upper(values: Sequence[float], level: float = SPREAD_BOUND_LEVEL
              ) -> Optional[Tuple[float, float]]:
  """The sample standard deviation of normal values and its one-sided
  `level` upper confidence bound, s sqrt((n-1) / chi2_{1-level}(n-1))
  (the chi-square interval of a normal variance); None below two values."""
  v = np.asarray(values, dtype=np.float64)
  if v.size < 2:
    return None
  s = float(np.std(v, ddof=1))
  dof = v.size - 1
  return s, s * math.sqrt(dof / chi2_quantile(1.0 - level, dof))


def reliability(architecture_std: float, seed_std: float, seeds: int
                ) -> Optional[float]:
  """The reliability of a mean of `seeds` trainings across architectures.

  a^2 / (a^2 + s^2 / k): Spearman-Brown's k-fold lengthening of the single
  training's a^2 / (a^2 + s^2) (Spearman 1910, Brown 1910). None when both
  are 0.
  """
  total = architecture_std ** 2 + seed_std ** 2 / seeds
  return None if total == 0 else architecture_std ** 2 / total


def tau_ceiling(architecture_std: float, seed_std: float, seeds: int
                ) -> Optional[float]:
  """The Kendall tau a perfect predictor reaches against k-seed means.

  A predictor equal to the true accuracies correlates with k-seed means at
  Pearson r = sqrt(reliability); for normal values tau = (2 / pi) asin(r)
  (Kendall 1948, Greiner's relation). One-shot scores cannot be expected
  above it.
  """
  r = reliability(architecture_std, seed_std, seeds)
  return None if r is None else 2.0 / math.pi * math.asin(math.sqrt(r))


def interval_list(pair: Tuple[float, float]) -> List[Optional[float]]:
  """A (low, high) interval as JSON: NaN becomes None."""
  return [None if math.isnan(v) else v for v in pair]
