"""The verdict of a search evaluation: one line a reader can act on.

From the per-candidate values of the pooled comparison (in points of top-1),
its exact one-sided Mann-Whitney p-value and the measured noise, exactly one
of four verdicts, decided in this order (docs/evaluate_search.md, "The
verdict"):

1. `searched_better`: p <= ALPHA.
2. `undecided` when the spread is not measured yet (fewer than one
   searched or two random candidates).
3. With X the difference this design detects at 80% power (`power`,
   simulated with the seed noise and the spread's upper confidence bound
   from the candidate x run table; without one, as with one seed per
   candidate, from the random values' own spread and its chi-square upper
   bound, which holds the seed noise of those values):
   if X <= the decisive difference (1 point by default),
   `random_as_good` when the searched mean is not above the random mean,
   else `no_difference`: no difference larger than X points.
4. Otherwise `undecided`, with the cheapest design (`power.needs`) that
   would detect the decisive difference: N searches x M seeds.

Pure numpy; every number it uses is in the returned dict, so the verdict
can be recomputed from evaluation.json.
"""

import math
from typing import Any, Dict, Optional, Sequence

import numpy as np

from tunas_search.evaluation import power
from tunas_search.evaluation import stats

SEARCHED_BETTER = 'searched_better'
RANDOM_AS_GOOD = 'random_as_good'
NO_DIFFERENCE = 'no_difference'
UNDECIDED = 'undecided'
KINDS = (SEARCHED_BETTER, RANDOM_AS_GOOD, NO_DIFFERENCE, UNDECIDED)
# A null result is decisive when the design detects this many points of
# top-1 (the "at most one point").
DECISIVE_DIFFERENCE = 1.0


def _difference_text(d: Dict[str, Any]) -> str:
  if d['difference'] is None:
    return 'mean difference -'
  text = f'mean difference {d["difference"]:+.2f} points'
  if d['low'] is not None:
    text += (f' [{d["low"]:+.2f}, {d["high"]:+.2f}] '
             f'({100 * d["level"]:.0f}% t interval)')
  return text


def decide(searched: Sequence[float], random: Sequence[float], *,
           p_value: float, seeds: int, seed_std: Optional[float],
           architecture_std_upper: Optional[float],
           decisive_difference: float = DECISIVE_DIFFERENCE,
           seed: int = 0, draws: int = power.DRAWS) -> Dict[str, Any]:
  """The verdict of one comparison.

  Args:
    searched, random: the candidates' values, in points of top-1 (means over
      `seeds` trainings).
    p_value: the exact one-sided Mann-Whitney p-value of searched > random.
    seeds: trainings averaged per candidate.
    seed_std: the noise of one training in points (None: not measured).
    architecture_std_upper: the upper confidence bound of the random
      architectures' spread in points (None: not measured). Without either,
      the power uses the spread of `random` itself.
    decisive_difference: the largest detectable difference (points) for
      which a null result is decisive.
    seed, draws: the power simulation.

  Returns:
    {'kind' (one of KINDS), 'text', 'difference' (`stats.mean_difference`),
    'p_value', 'detectable_difference', 'needs' (`power.needs` or None),
    'spread_source' ('run_table' or 'random_values': which spread the power
    used), 'random_values_std' and its upper bound, and the inputs}.
  """
  searched = np.asarray(searched, dtype=np.float64)
  random = np.asarray(random, dtype=np.float64)
  difference = stats.mean_difference(searched, random)
  out = {'difference': difference, 'p_value': p_value, 'alpha': power.ALPHA,
         'seeds': seeds, 'seed_std': seed_std,
         'architecture_std_upper': architecture_std_upper,
         'decisive_difference': decisive_difference,
         'n_searched': int(searched.size), 'n_random': int(random.size),
         'power': power.POWER, 'power_draws': draws, 'power_seed': seed,
         'detectable_difference': None, 'needs': None,
         'spread_source': None, 'random_values_std': None,
         'random_values_std_upper': None,
         'spread_level': stats.SPREAD_BOUND_LEVEL}
  head = _difference_text(difference)
  if searched.size and random.size and p_value <= power.ALPHA:
    return dict(out, kind=SEARCHED_BETTER,
                text=f'{head}; searched better (p = {p_value:.3f})')
  if searched.size < 1 or random.size < 2:
    return dict(out, kind=UNDECIDED, text=(
        f'{head}; undecided at this budget: the spread is not measured yet '
        '(one searched and two random candidates needed)'))
  values_std, values_upper = stats.std_upper(random)
  out.update(random_values_std=values_std,
             random_values_std_upper=values_upper)
  if seed_std is None or architecture_std_upper is None:
    # No candidate x run table (one seed each): the random values' own
    # spread is exactly the sqrt(architecture^2 + seed^2 / seeds) the power
    # needs for this design; it cannot say how much of it more seeds would
    # average away, so `needs` counts none (seed_std 0: more searches only).
    out['spread_source'] = 'random_values'
    design = dict(n_random=int(random.size), seed_std=0.0,
                  architecture_std=values_upper, seed=seed, draws=draws)
    design_seeds = 1
    basis = (f'; power from the {random.size} random values\' spread: '
             f'{values_std:.2f} points, seed noise included, '
             f'{100 * stats.SPREAD_BOUND_LEVEL:.0f}% upper bound '
             f'{values_upper:.2f}')
  else:
    out['spread_source'] = 'run_table'
    design = dict(n_random=int(random.size), seed_std=seed_std,
                  architecture_std=architecture_std_upper, seed=seed,
                  draws=draws)
    design_seeds = seeds
    basis = ''
  detectable = power.detectable_difference(
      n_searched=int(searched.size), seeds=design_seeds, **design)
  out['detectable_difference'] = detectable
  if detectable <= decisive_difference:
    if difference['difference'] <= 0:
      return dict(out, kind=RANDOM_AS_GOOD, text=(
          f'{head}; random as good or better (p = {p_value:.3f}; this '
          f'design detects {detectable:.2f} points at 80% power{basis})'))
    return dict(out, kind=NO_DIFFERENCE, text=(
        f'{head}; no difference larger than {detectable:.2f} points (at '
        f'80% power; p = {p_value:.3f}{basis})'))
  needs = power.needs(decisive_difference, **design)
  out['needs'] = needs
  detects = (f'this design detects {detectable:.2f}' if math.isfinite(
      detectable) else f'{searched.size} vs {random.size} cannot reach p <= '
             f'{power.ALPHA:g}')
  if needs is None:
    # At one seed the grid has searches only (more seeds count as no help).
    grid = (f'{power.MAX_SEARCHES} searches at 1 seed'
            if out['spread_source'] == 'random_values' else
            f'{power.MAX_SEARCHES} searches x {power.MAX_SEEDS} seeds')
    why = (f'needs more than {grid} (the architectures '
           f'may scatter by up to {design["architecture_std"]:.2f} points)')
  else:
    seeds_text = '1 seed' if needs['seeds'] == 1 else f'{needs["seeds"]} seeds'
    why = f'needs {needs["searches"]} searches x {seeds_text}'
  if out['spread_source'] == 'random_values':
    basis += ('; one training per candidate cannot split the seed noise '
              'off the spread, so more seeds are counted as no help')
  return dict(out, kind=UNDECIDED, text=(
      f'{head}; undecided at this budget: {why} (with {random.size} random '
      f'ones, to detect {decisive_difference:g} point at 80% power; '
      f'{detects}; p = {p_value:.3f}{basis})'))
