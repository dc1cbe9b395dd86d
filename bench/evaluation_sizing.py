#!/usr/bin/env python3
"""Sizes a search evaluation from pilot evaluations: JSON on stdout.

  .venv/bin/python bench/evaluation_sizing.py \\
      --evaluation=/tmp/pilot/steps-1000 --evaluation=/tmp/pilot/steps-3000

Each --evaluation is an evaluation dir of bin/evaluate_search.py (or its
evaluation.json), typically one per stand-alone budget on the same few
random architectures of the window (`make evaluation-pilot`). From its
per-candidate runs (never from its printed summary) it recomputes the
candidate x run decomposition (tunas_search/evaluation/stats.py: seed noise
from the residual, the random architectures' spread and its 90% upper
bound), then simulates the exact test (tunas_search/evaluation/power.py) to
say, per budget:

  * what the pilot's own design detects at 80% power, and
  * the cheapest searches x seeds x random architectures (--num_random: one
    number or several, e.g. 12,20,30) whose verdict is decisive: a
    --decisive_difference point difference detected at 80% power, with the
    spread at its upper bound;
  * for each --design=SEARCHESxSEEDSxRANDOM (e.g. 10x1x20, repeatable), its
    power at --decisive_difference and the difference it detects at 80%
    power, with the spread at its estimate and at its upper bound.

An evaluation with one seed per candidate has no run table: it is sized
from the random candidates' own spread (seed noise included, with its 90%
chi-square upper bound), which gives one-seed designs their power exactly
and counts more seeds as no help (`spread_source`: `random_values`, else
`run_table`), as the report's verdict does.

The budget (stand-alone steps, batch) comes from the dir's config.json; a
bare evaluation.json has none. Statistics only: seconds, no TensorFlow.
"""

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from tunas_search.evaluation import noise as noise_lib
from tunas_search.evaluation import power
from tunas_search.evaluation import report
from tunas_search.evaluation import stats
from tunas_search.evaluation import verdict


class SizingError(ValueError):
  """A pilot that cannot be read; the message is one line."""


def _read(path: str) -> Dict[str, Any]:
  """The report and, for a dir, its config."""
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  report_path = (os.path.join(path, report.JSON_FILENAME)
                 if os.path.isdir(path) else path)
  try:
    with open(report_path, encoding='utf-8') as f:
      built = json.load(f)
  except (OSError, ValueError) as e:
    raise SizingError(f'--evaluation={path}: no readable '
                      f'{report.JSON_FILENAME}: {e}') from None
  if not isinstance(built, dict) or 'candidates' not in built:
    raise SizingError(f'--evaluation={path}: not an evaluation report')
  config = None
  config_path = os.path.join(directory, 'config.json')
  if os.path.isdir(path) and os.path.exists(config_path):
    with open(config_path, encoding='utf-8') as f:
      config = json.load(f)
  return {'built': built, 'config': config}


def _budget(config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
  if config is None:
    return {'train_steps': None, 'epochs': None, 'train_batch_size': None}
  return {k: config.get(k) for k in ('train_steps', 'epochs',
                                     'train_batch_size')}


def parse_design(text: str) -> Tuple[int, int, int]:
  """'10x1x20' -> (searches, seeds, random architectures)."""
  parts = text.lower().split('x')
  try:
    numbers = tuple(int(p) for p in parts)
  except ValueError:
    numbers = ()
  if len(numbers) != 3 or min(numbers) < 1:
    raise SizingError(f'--design={text}: expected SEARCHESxSEEDSxRANDOM, '
                      'three whole numbers of at least 1, e.g. 10x1x20')
  return numbers


def _design(design: Tuple[int, int, int], *, difference: float,
            seed_std: float, spreads: Dict[str, float],
            seed: int) -> Dict[str, Any]:
  """Power and detectable difference of one design, per spread."""
  searches, seeds, randoms = design
  out = {'searches': searches, 'seeds': seeds, 'num_random': randoms,
         'trainings': (searches + randoms) * seeds,
         'difference_points': difference}
  for name, spread in spreads.items():
    kwargs = dict(n_searched=searches, n_random=randoms, seeds=seeds,
                  seed_std=seed_std, architecture_std=spread, seed=seed)
    out[name] = {'spread_points': spread,
                 'power': power.power(difference, **kwargs),
                 'detectable_points': power.detectable_difference(**kwargs)}
  return out


def _random_values(candidates: Sequence[Dict[str, Any]], split: str,
                   runs: Sequence[int]) -> List[float]:
  """Each random candidate's mean over the compared runs, in points."""
  out = []
  for e in candidates:
    picked = [r[split] for r in e['runs'] if r['run'] in runs]
    if e['kind'] == 'random' and picked:
      out.append(100 * sum(picked) / len(picked))
  return out


def size(path: str, *, split: str, num_random: Optional[List[int]],
         decisive_difference: float, seed: int,
         designs: Sequence[Tuple[int, int, int]] = ()) -> Dict[str, Any]:
  """The sizing of one pilot evaluation.

  From the candidate x run table when it has one (two runs); otherwise, as
  after one seed per candidate, from the random candidates' own spread,
  which holds the seed noise: the power of one-seed designs exactly, and
  more seeds counted as no help (the verdict's rule, `verdict.decide`).
  """
  found = _read(path)
  built = found['built']
  noise = noise_lib.noise_of(built['candidates'])
  n = noise[split]
  randoms = sum(1 for e in built['candidates']
                if e['kind'] == 'random' and e['runs'])
  out = {'evaluation': path, 'split': split, **_budget(found['config']),
         'random_candidates_trained': randoms,
         'seeds_compared': noise['seeds_compared'],
         'bound_level': n['bound_level'], 'spread_source': None,
         'seed_std_points': None, 'run_std_points': None,
         'spread_points': None, 'spread_upper_points': None,
         'detectable_now_points': None, 'decisive': None, 'designs': None}
  seeds_now = max(1, noise['seeds_compared'])
  if n['seed_std'] is not None:
    seed_std, upper = 100 * n['seed_std'], 100 * n[
        'random_architecture_std_upper']
    out.update(spread_source='run_table', seed_std_points=seed_std,
               run_std_points=100 * n['run_std'],
               spread_points=100 * n['random_architecture_std'],
               spread_upper_points=upper)
  else:
    spread = stats.std_upper(_random_values(
        built['candidates'], split, noise['runs_compared']), n['bound_level'])
    if spread is None:
      out['note'] = ('the spread is not measured: it needs two finished '
                     'random candidates (and two runs of two candidates to '
                     'split off the seed noise)')
      return out
    seed_std, upper, seeds_now = 0.0, spread[1], 1
    out.update(spread_source='random_values', spread_points=spread[0],
               spread_upper_points=upper,
               note=('no candidate x run table: the spread is the random '
                     'values\' own, seed noise included, so designs are '
                     'sized as if more seeds did not help'))
  searched = [e for e in built['candidates'] if e['kind'] == 'searched']
  if searched and randoms:
    out['detectable_now_points'] = power.detectable_difference(
        n_searched=len(searched), n_random=randoms, seeds=seeds_now,
        seed_std=seed_std, architecture_std=upper, seed=seed)
  plan_random = num_random or [randoms]
  out['decisive'] = {
      'num_random': plan_random, 'difference_points': decisive_difference,
      'design': power.needs(decisive_difference, n_random=plan_random,
                            seed_std=seed_std, architecture_std=upper,
                            seed=seed)}
  spreads = {'at_spread': out['spread_points'], 'at_spread_upper': upper}
  out['designs'] = [_design(d, difference=decisive_difference,
                            seed_std=seed_std, spreads=spreads, seed=seed)
                    for d in designs]
  return out


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--evaluation', action='append', required=True,
                      help='An evaluation dir (or evaluation.json); repeat '
                      'one per stand-alone budget.')
  parser.add_argument('--split', default=report.HEADLINE,
                      choices=report.SPLITS)
  parser.add_argument('--num_random', default=None,
                      help='Random architectures of the planned evaluation, '
                      "one number or several (12,20,30; default: the "
                      "pilot's).")
  parser.add_argument('--decisive_difference', type=float,
                      default=verdict.DECISIVE_DIFFERENCE,
                      help='Points of top-1 the planned design must detect '
                      'at 80%% power.')
  parser.add_argument('--design', action='append', default=[],
                      help='A planned design SEARCHESxSEEDSxRANDOM (e.g. '
                      '10x1x20) to report the power of; repeatable.')
  parser.add_argument('--seed', type=int, default=0,
                      help='Seed of the power simulation.')
  args = parser.parse_args(argv)
  num_random = None
  if args.num_random is not None:
    try:
      num_random = [int(n) for n in args.num_random.split(',')]
    except ValueError:
      num_random = [0]
    if min(num_random) < 1:
      parser.error(f'--num_random={args.num_random}: expected numbers of at '
                   'least 1, e.g. 12 or 12,20,30')
  if args.decisive_difference <= 0:
    parser.error('--decisive_difference must be positive, got '
                 f'{args.decisive_difference}')
  try:
    designs = [parse_design(d) for d in args.design]
    budgets = [size(p, split=args.split, num_random=num_random,
                    decisive_difference=args.decisive_difference,
                    seed=args.seed, designs=designs)
               for p in args.evaluation]
  except SizingError as e:
    print(f'{parser.prog}: error: {e}', file=sys.stderr)
    return 2
  print(json.dumps({'budgets': budgets,
                    'search_cost_in_trainings':
                    power.SEARCH_COST_IN_TRAININGS,
                    'power': power.POWER, 'alpha': power.ALPHA,
                    'draws': power.DRAWS}, indent=1))
  return 0


if __name__ == '__main__':
  sys.exit(main())
