#!/usr/bin/env python3
"""Retargeted against fully searched architectures, target by target: JSON.

  .venv/bin/python bench/retarget_vs_search.py \\
      --evaluation=DIR/eval60 --evaluation=DIR/eval100 --evaluation=DIR/eval72

Each --evaluation is an evaluation dir of bin/evaluate_search.py (or its
evaluation.json) of exactly two searches at one target: a retarget (its
model dir holds retarget.json) and a full search, beside random
architectures of the target's window (`make retarget-question`,
docs/retarget.md "How far does it hold?"). Per target it gives both
architectures' cost, stand-alone accuracy (test and validation, one
training each), rank among the random ones and mean one-shot accuracy, and
the difference retarget - search in points. Over the targets:

  * the yardstick: how much one architecture's one-training accuracy
    scatters, the random architectures' standard deviation pooled within
    targets (architecture spread and seed noise; the fully searched
    architectures of issue 55 scattered as much) and its 90% chi-square
    upper bound;
  * each difference's 95% interval, d +- t s sqrt(2), and the mean
    difference's over k targets, +- t s sqrt(2 / k) (t on the pooled
    degrees of freedom);
  * `detectable_points`: the mean difference detected at 80% power
    (two-sided 5%), (t_0.975 + t_0.80) s_upper sqrt(2 / k);
  * `verdict`: `retarget_worse` or `retarget_better` where the mean's
    interval excludes 0, else `undecided` (differences under
    `detectable_points` cannot be told apart: not a proof of equality).

Statistics only: seconds, no TensorFlow.
"""

import argparse
import json
import math
import os
import sys
from typing import Any, Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from tunas_search.evaluation import report
from tunas_search.evaluation import stats

# search/retarget.py's RETARGET_FILENAME (that module needs TensorFlow; a
# test holds the two equal).
RETARGET_FILENAME = 'retarget.json'
SPLITS = ('test', 'validation')
LEVEL = 0.95
POWER = 0.80


class ComparisonError(ValueError):
  """An evaluation that cannot be compared; the message is one line."""


def _read(path: str) -> Dict[str, Any]:
  report_path = (os.path.join(path, report.JSON_FILENAME)
                 if os.path.isdir(path) else path)
  if not os.path.exists(report_path):
    raise ComparisonError(f'--evaluation={path}: no {report.JSON_FILENAME} '
                          '(run bin/evaluate_search.py there first)')
  with open(report_path) as f:
    return json.load(f)


def _candidate(evaluation: Dict[str, Any], search: Dict[str, Any],
               random_values: Dict[str, List[float]]) -> Dict[str, Any]:
  by_id = {c['id']: c for c in evaluation['candidates']}
  c = by_id[search['candidate']]
  out = {'model_dir': search['model_dir'], 'cost': c['cost'],
         'in_window': search.get('in_window'),
         'one_shot': (sum(c['one_shot']) / len(c['one_shot'])
                      if c.get('one_shot') else None)}
  for split in SPLITS:
    value = c['compared'][split]
    out[split] = value
    out[f'{split}_rank'] = stats.rank_among(value, random_values[split])
  return out


def target_row(path: str, evaluation: Dict[str, Any]) -> Dict[str, Any]:
  """One target's comparison; raises ComparisonError on another design."""
  searches = evaluation.get('searches', [])
  if len(searches) != 2:
    raise ComparisonError(f'--evaluation={path}: {len(searches)} searches; '
                          'expected 2 (a retarget and a full search)')
  is_retarget = [os.path.exists(os.path.join(s['model_dir'],
                                             RETARGET_FILENAME))
                 for s in searches]
  if sorted(is_retarget) != [False, True]:
    raise ComparisonError(
        f'--evaluation={path}: {sum(is_retarget)} of its 2 search dirs hold '
        f'{RETARGET_FILENAME}; expected exactly one (the retarget)')
  random_values = {split: [c['compared'][split]
                           for c in evaluation['candidates']
                           if c['kind'] == 'random'
                           and c['compared'].get(split) is not None]
                   for split in SPLITS}
  if min(len(v) for v in random_values.values()) < 2:
    raise ComparisonError(f'--evaluation={path}: fewer than 2 trained random '
                          'architectures (unfinished? rerun evaluate_search)')
  retargeted = searches[is_retarget.index(True)]
  searched = searches[is_retarget.index(False)]
  row = {
      'evaluation': path, 'target': evaluation['target'],
      'window': evaluation.get('window'),
      'retarget': _candidate(evaluation, retargeted, random_values),
      'search': _candidate(evaluation, searched, random_values),
      'random': {split: stats.summary(v) for split, v in
                 random_values.items()},
      '_random_values': random_values,
  }
  row['difference_points'] = {
      split: 100 * (row['retarget'][split] - row['search'][split])
      for split in SPLITS}
  return row


def _pooled(rows: Sequence[Dict[str, Any]], split: str):
  """Pooled within-target std of the random values (points), its dof and
  its one-sided 90% chi-square upper bound."""
  groups = [[100 * v for v in row['_random_values'][split]] for row in rows]
  std = stats.pooled_seed_std(groups)  # any groups' pooled within-std
  dof = sum(len(g) - 1 for g in groups)
  upper = std * math.sqrt(
      dof / stats.chi2_quantile(1.0 - stats.SPREAD_BOUND_LEVEL, dof))
  return std, dof, upper


def compare(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
  """The comparison over targets (see the module docstring)."""
  k = len(rows)
  overall = {}
  for split in SPLITS:
    std, dof, upper = _pooled(rows, split)
    t = stats.t_quantile(0.5 + LEVEL / 2, dof)
    half_one = t * std * math.sqrt(2)
    for row in rows:
      d = row['difference_points'][split]
      row.setdefault('difference_interval_points', {})[split] = [
          d - half_one, d + half_one]
    mean = sum(r['difference_points'][split] for r in rows) / k
    half = t * std * math.sqrt(2 / k)
    low, high = mean - half, mean + half
    verdict = ('retarget_worse' if high < 0 else
               'retarget_better' if low > 0 else 'undecided')
    overall[split] = {
        'mean_difference_points': mean,
        'interval_points': [low, high],
        'spread_points': std, 'spread_upper_points': upper,
        'spread_dof': dof,
        'detectable_points': ((t + stats.t_quantile(POWER, dof)) * upper
                              * math.sqrt(2 / k)),
        'verdict': verdict,
    }
  for row in rows:
    del row['_random_values']
  return {'benchmark': 'retarget_vs_search', 'targets': list(rows),
          'over_targets': overall, 'level': LEVEL, 'power': POWER,
          'spread_bound_level': stats.SPREAD_BOUND_LEVEL}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--evaluation', action='append', required=True,
                      help='an evaluate_search dir (or its evaluation.json) '
                      'of one retarget and one full search; repeat per '
                      'target')
  args = parser.parse_args(argv)
  try:
    rows = [target_row(path, _read(path)) for path in args.evaluation]
  except ComparisonError as e:
    print(f'retarget_vs_search: {e}', file=sys.stderr)
    return 2
  print(json.dumps(compare(rows), indent=2))
  return 0


if __name__ == '__main__':
  sys.exit(main())
