"""The noise of repeated trainings, from a report's per-candidate entries.

Which runs every trained candidate has finished (the ones compared), and the
candidate x run decomposition (`stats.two_way`) of the largest complete
table: seed noise, the effect of the shared run seed, the random
architectures' spread with its upper bound, and the ceiling of a rank
correlation against the compared k-seed means. Pure numpy; `report` and
bench/evaluation_sizing.py read it.
"""

from typing import Any, Dict, List, Sequence

from tunas_search.evaluation import candidates as candidates_lib
from tunas_search.evaluation import stats

# The headline first: the test split is the one no controller reward saw.
SPLITS = ('test', 'validation')


def distinct(entries: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
  """One entry per architecture: candidates of one architecture share their
  scores and trainings (`job.owners`) and would count twice."""
  first: Dict[str, Dict[str, Any]] = {}
  for e in entries.values():
    first.setdefault(e['architecture'], e)
  return list(first.values())


def compared_runs(entries: Dict[str, Dict[str, Any]]) -> List[int]:
  """The runs every candidate with a finished run has finished."""
  sets = [{r['run'] for r in e['runs']} for e in distinct(entries)
          if e['runs']]
  return sorted(set.intersection(*sets)) if sets else []


def _run_table(values: List[Dict[str, Any]], split: str):
  """The candidate x run table with the most residual degrees of freedom:
  runs 0..j-1 of every candidate that has them all."""
  best, best_dof = None, 0
  longest = max((len(e['runs']) for e in values), default=0)
  for j in range(2, longest + 1):
    rows = [e for e in values if {r['run'] for r in e['runs']} >=
            set(range(j))]
    dof = (len(rows) - 1) * (j - 1)
    if dof > best_dof and len(rows) >= 2:
      best, best_dof = (rows, j), dof
  if best is None:
    return None, None
  rows, j = best
  table = [[next(r[split] for r in e['runs'] if r['run'] == run)
            for run in range(j)] for e in rows]
  return rows, table


def noise(entries: Dict[str, Dict[str, Any]], runs: List[int]
          ) -> Dict[str, Any]:
  """Seed noise, run effect, the random architectures' spread with its
  upper bound, and the tau ceiling of the k-seed means compared."""
  values = distinct(entries)
  k = len(runs)
  out = {'seeds_compared': k, 'runs_compared': runs,
         'seed_vs_seed_kendall_tau': stats.seed_vs_seed_tau(
             [[r['validation'] for r in e['runs']] for e in values])}
  for split in SPLITS:
    rows, table = _run_table(values, split)
    randoms = [i for i, e in enumerate(rows or [])
               if e['kind'] == candidates_lib.RANDOM]
    d = stats.two_way(table, randoms) if rows and len(randoms) >= 2 else None
    item = {'seed_std': None, 'run_std': None,
            'random_architecture_std': None,
            'random_architecture_std_upper': None,
            'bound_level': stats.SPREAD_BOUND_LEVEL, 'table': None,
            'reliability': None, 'tau_ceiling': None,
            'tau_ceiling_upper': None}
    if d is not None:
      item.update(
          seed_std=d.seed_std, run_std=d.run_std,
          random_architecture_std=d.architecture_std,
          random_architecture_std_upper=d.architecture_std_upper,
          table={'candidates': [e['id'] for e in rows], 'runs': d.runs,
                 'random_rows': d.population, 'dof_residual': d.dof_residual,
                 'ms_random': d.ms_population, 'ms_residual': d.ms_residual})
      if k:
        item.update(
            reliability=stats.reliability(d.architecture_std, d.seed_std, k),
            tau_ceiling=stats.tau_ceiling(d.architecture_std, d.seed_std, k),
            tau_ceiling_upper=stats.tau_ceiling(d.architecture_std_upper,
                                                d.seed_std, k))
    out[split] = item
  return out


def noise_of(candidates: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
  """`noise` recomputed from a report's per-candidate entries
  (`candidates` of evaluation.json)."""
  entries = {e['id']: e for e in candidates}
  return noise(entries, compared_runs(entries))
