"""The power of the searched-vs-random comparison, by simulating the test run.

The report compares searched and random architectures with a one-sided
exact Mann-Whitney test (`stats.mann_whitney`) at 5%, on groups of a few
candidates, each the mean of a few seeds. A normal approximation with known
variance overstates what such a test detects, so everything here simulates
the test itself: a candidate's value is its architecture's true accuracy
(normal, standard deviation `architecture_std`) plus the mean of `seeds`
trainings' noise (normal, `seed_std` each); searched architectures are
shifted up by the difference; the test rejects when U reaches the exact
critical value of these group sizes. Simulated values are continuous, so
ties (which the real integer counts of correct images make rare) do not
occur and U's exact null distribution without ties applies.

One trick makes it fast and every design share its random numbers: U only
depends on which of the standardised differences z_random - z_searched lie
below difference / sd, sd = sqrt(architecture_std^2 + seed_std^2 / seeds),
so for each draw the smallest standardised effect that rejects is the u*-th
smallest of those na x nb differences (u* the critical U). Power is then the
share of draws whose effect lies below the difference, and the detectable
difference at 80% power a quantile of them: one seeded set of draws per
group size, no search over effects.
"""

import functools
import math
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np

ALPHA = 0.05  # One-sided level of the test the report runs.
POWER = 0.8  # The power a design is sized for (Cohen 1988, ch. 2).
DRAWS = 4000  # Simulated evaluations per group size: power +-0.007 (1 SE).
# Trainings a search costs, to rank designs by (`needs`): on the embedded
# preset a 3,000-step search took ~8 minutes and a 1,000-step stand-alone
# training ~2 (docs/evaluate_search.md, "Sizing").
SEARCH_COST_IN_TRAININGS = 4.0
# The grid `needs` searches.
MAX_SEARCHES, MAX_SEEDS = 30, 20


@functools.lru_cache(maxsize=None)
def u_null_tail(n_a: int, n_b: int) -> np.ndarray:
  """P(U >= u) for u = 0 .. n_a n_b under the null hypothesis, no ties.

  Exact: the largest of the n_a + n_b values is in group a with probability
  n_a / (n_a + n_b), and then beats all of b (Mann and Whitney 1947's
  recursion, in probabilities so that it never overflows).
  """
  prob = {}
  for m in range(n_a + 1):
    for n in range(n_b + 1):
      p = np.zeros(m * n + 1)
      if m == 0 or n == 0:
        p[0] = 1.0
      else:
        p[n:] += m / (m + n) * prob[m - 1, n]
        p[:m * (n - 1) + 1] += n / (m + n) * prob[m, n - 1]
      prob[m, n] = p
  density = prob[n_a, n_b]
  return np.cumsum(density[::-1])[::-1]


def critical_u(n_a: int, n_b: int, alpha: float = ALPHA) -> Optional[int]:
  """The smallest U whose exact one-sided p-value is <= alpha; None when no
  U is (e.g. one searched against 12 random: the smallest p is 1/13)."""
  if n_a < 1 or n_b < 1:
    return None
  tail = u_null_tail(n_a, n_b)
  # Tolerance: the tail probabilities are sums of rounded products.
  hits = np.nonzero(tail <= alpha * (1 + 1e-9))[0]
  return int(hits[0]) if hits.size else None


@functools.lru_cache(maxsize=64)
def _effects(n_a: int, n_b: int, draws: int, seed: int,
             alpha: float) -> np.ndarray:
  """Per draw, the standardised shift above which the test rejects, sorted
  (inf where it never can)."""
  u_star = critical_u(n_a, n_b, alpha)
  if u_star is None:
    return np.full(draws, np.inf)
  rng = np.random.default_rng([seed, n_a, n_b])
  z_a = rng.standard_normal((draws, n_a, 1))
  z_b = rng.standard_normal((draws, 1, n_b))
  differences = (z_b - z_a).reshape(draws, -1)
  if u_star == 0:
    return np.full(draws, -np.inf)
  # U(e) = #(differences < e) >= u_star once e passes the u_star-th smallest.
  effects = np.partition(differences, u_star - 1, axis=1)[:, u_star - 1]
  return np.sort(effects)


def spread(seed_std: float, architecture_std: float, seeds: int) -> float:
  """Standard deviation of one candidate's mean over `seeds` trainings."""
  return math.sqrt(architecture_std ** 2 + seed_std ** 2 / seeds)


def power(difference: float, *, n_searched: int, n_random: int, seeds: int,
          seed_std: float, architecture_std: float, draws: int = DRAWS,
          seed: int = 0, alpha: float = ALPHA) -> float:
  """The share of simulated evaluations whose exact test rejects.

  Args:
    difference: the true mean advantage of searched architectures (in the
      units of the standard deviations, e.g. points of top-1).
    n_searched, n_random: group sizes of the test.
    seeds: trainings averaged per candidate.
    seed_std: noise of one training.
    architecture_std: spread of the architectures' true accuracies.
    draws, seed: the simulation (the same seed, the same draws).
    alpha: the one-sided level.
  """
  effects = _effects(n_searched, n_random, draws, seed, alpha)
  sd = spread(seed_std, architecture_std, seeds)
  if sd == 0:
    return float(np.mean(effects < (np.inf if difference > 0 else 0.0)))
  return float(np.mean(effects < difference / sd))


def detectable_difference(*, n_searched: int, n_random: int, seeds: int,
                          seed_std: float, architecture_std: float,
                          target_power: float = POWER, draws: int = DRAWS,
                          seed: int = 0, alpha: float = ALPHA) -> float:
  """The smallest difference the test detects with `target_power` (inf if
  none: groups too small for the level)."""
  effects = _effects(n_searched, n_random, draws, seed, alpha)
  index = max(0, math.ceil(target_power * draws) - 1)
  return float(effects[index] * spread(seed_std, architecture_std, seeds))


def needs(difference: float, *, n_random: Union[int, Sequence[int]],
          seed_std: float, architecture_std: float,
          max_searches: int = MAX_SEARCHES, max_seeds: int = MAX_SEEDS,
          search_cost: float = SEARCH_COST_IN_TRAININGS,
          target_power: float = POWER, draws: int = DRAWS, seed: int = 0,
          alpha: float = ALPHA) -> Optional[Dict[str, Any]]:
  """The cheapest design that detects `difference` with `target_power`.

  Over searches 1..max_searches, seeds 1..max_seeds and the given numbers of
  random candidates, the design of least cost: searches x search_cost +
  (searches + random) x seeds trainings; ties go to fewer searches, then to
  fewer random candidates.

  Returns:
    {'searches', 'seeds', 'random', 'power', 'cost_in_trainings'}, or None
    when no design of the grid reaches the power (the architectures scatter
    too much for `max_searches`).
  """
  randoms = [n_random] if isinstance(n_random, int) else sorted(n_random)
  best = None
  for n in range(1, max_searches + 1):
    for r in randoms:
      effects = _effects(n, r, draws, seed, alpha)
      needed = effects[max(0, math.ceil(target_power * draws) - 1)]
      for k in range(1, max_seeds + 1):
        if needed * spread(seed_std, architecture_std, k) < difference:
          cost = n * search_cost + (n + r) * k
          if best is None or cost < best['cost_in_trainings']:
            best = {'searches': n, 'seeds': k, 'random': r,
                    'cost_in_trainings': cost,
                    'power': power(difference, n_searched=n, n_random=r,
                                   seeds=k, seed_std=seed_std,
                                   architecture_std=architecture_std,
                                   draws=draws, seed=seed, alpha=alpha)}
          break  # More seeds only cost more.
  return best
