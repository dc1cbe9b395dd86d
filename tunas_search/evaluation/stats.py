"""The statistics of a search evaluation, in plain numpy (no TensorFlow, no scipy).

Rank correlations (Kendall's tau-b with ties, Spearman's rho on average
ranks) with seeded percentile-bootstrap intervals, where a value stands among
a population (rank, mid-rank percentile, a one-sided rank test), the
Mann-Whitney comparison of two groups (probability of superiority and its
one-sided p-value), the seed noise of repeated trainings and the difference
a comparison can detect. The tests check each against values computed by
hand.
"""

import itertools
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

# Quantiles of the standard normal distribution: one-sided 5% level and 80%
# power, the usual design of a comparison (Cohen 1988, ch. 2).
Z_ALPHA_5_PERCENT = 1.6448536269514722
Z_POWER_80_PERCENT = 0.8416212335729143
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
  """Kendall's tau-b between seeds: the noise ceiling of any rank correlation.

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


def detectable_difference(spread: float, n_a: int, n_b: int) -> float:
  """The smallest true difference of group means found 80% of the time.

  A one-sided 5% test of two group means whose members scatter with
  standard deviation `spread` (normal approximation):
  (z_0.95 + z_0.80) x spread x sqrt(1/n_a + 1/n_b).
  """
  if n_a < 1 or n_b < 1:
    return float('nan')
  return ((Z_ALPHA_5_PERCENT + Z_POWER_80_PERCENT) * spread *
          math.sqrt(1.0 / n_a + 1.0 / n_b))


def seeds_for(difference: float, seed_std: float,
              architecture_std: float, n_a: int, n_b: int,
              max_seeds: int = 100) -> Optional[int]:
  """Seeds per candidate after which `detectable_difference` <= difference.

  Each candidate's mean over k seeds scatters as sqrt(architecture_std^2 +
  seed_std^2 / k). None when even `max_seeds` seeds are not enough (the
  architectures themselves scatter too much for groups this small).
  """
  for k in range(1, max_seeds + 1):
    spread = math.sqrt(architecture_std ** 2 + seed_std ** 2 / k)
    if detectable_difference(spread, n_a, n_b) <= difference:
      return k
  return None


def architecture_std(means: Sequence[float], seed_std: Optional[float],
                     seeds: int) -> Optional[float]:
  """Spread of the candidates' true accuracies, seed noise taken out.

  The variance of per-candidate means over `seeds` seeds, less the part the
  seed noise explains (seed_std^2 / seeds), floored at 0. None below two
  means.
  """
  m = np.asarray(means, dtype=np.float64)
  if m.size < 2:
    return None
  variance = float(m.var(ddof=1))
  if seed_std is not None and seeds > 0:
    variance -= seed_std ** 2 / seeds
  return math.sqrt(max(0.0, variance))


def interval_list(pair: Tuple[float, float]) -> List[Optional[float]]:
  """A (low, high) interval as JSON: NaN becomes None."""
  return [None if math.isnan(v) else v for v in pair]
