"""The report of a search evaluation: JSON and a text table (`figure` draws).

`build` turns the plan and whatever work is finished into one JSON-ready
dict, so a partial evaluation reports what it has, on the finished counts:
per candidate its one-shot scores, its integer counts of correct images per
training and the value it is compared on (the mean count over the runs
every trained candidate has finished, as a fraction, so that ties are
exact); per search where its architecture ranks among the random ones (at
the target's cost and at its own); the searched-vs-random comparison of the
searches inside the target's cost window, with its verdict (`verdict`); the
reference networks on their own rows; the rank correlation of one-shot and
stand-alone accuracy beside the ceiling the seeds allow; and the candidate x
run decomposition of the trainings (`stats.two_way`). The test split is the
headline (the controller's rewards came from the validation split); the
validation split is reported beside it.
"""

import math
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import numpy as np

from tunas_search.evaluation import candidates as candidates_lib
from tunas_search.evaluation import noise as noise_lib
from tunas_search.evaluation import stats
from tunas_search.evaluation import verdict as verdict_lib

if TYPE_CHECKING:
  from tunas_search.evaluation.worklist import Plan  # pylint: disable=g-bad-import-order

JSON_FILENAME = 'evaluation.json'
TEXT_FILENAME = 'evaluation.txt'
FIGURE_FILENAME = 'evaluation.png'
SPLITS = noise_lib.SPLITS  # The headline first.
HEADLINE = 'test'


def _correct(run: Dict[str, Any], split: str) -> Optional[int]:
  """A training's count of correct images (None for old results)."""
  examples = run.get(f'{split}_examples')
  return int(round(run[split] * examples)) if examples else None


def _candidate_entry(candidate, scores, runs) -> Dict[str, Any]:
  entry = candidate.to_dict()
  entry['one_shot'] = scores.get(candidate.id)
  entry['runs'] = sorted(runs.get(candidate.id, []), key=lambda r: r['run'])
  for split in SPLITS:
    entry[split] = stats.summary([r[split] for r in entry['runs']])
    entry[f'{split}_correct'] = [_correct(r, split) for r in entry['runs']]
  return entry


def _compared_value(entry: Dict[str, Any], split: str,
                    runs: Sequence[int]) -> Optional[float]:
  """The mean over `runs` of the integer count of correct images, over the
  examples (exact ties); the mean accuracy where counts are missing."""
  picked = [(r, c) for r, c in zip(entry['runs'], entry[f'{split}_correct'])
            if r['run'] in runs]
  if not picked:
    return None
  examples = {r.get(f'{split}_examples') for r, _ in picked}
  if None in {c for _, c in picked} or len(examples) != 1:
    return float(np.mean([r[split] for r, _ in picked]))
  # A mean of integers, correctly rounded: equal means give equal floats.
  return sum(c for _, c in picked) / len(picked) / examples.pop()


def _values(entries: Sequence[Dict[str, Any]], split: str) -> List[float]:
  return [e['compared'][split] for e in entries
          if e['compared'][split] is not None]


def _of_kind(entries: Dict[str, Dict[str, Any]], kind: str
             ) -> List[Dict[str, Any]]:
  return [e for e in entries.values() if e['kind'] == kind]


def _versus(value: Optional[float], population: Sequence[float]
            ) -> Optional[Dict[str, Any]]:
  """Where `value` stands among `population` (None if either is missing)."""
  if value is None or not population:
    return None
  return {'rank': stats.rank_among(value, population),
          'of': len(population) + 1,
          'percentile': stats.percentile(value, population),
          'probability_beats_random': stats.percentile(value,
                                                       population) / 100,
          'p_value': stats.rank_test_p_value(value, population),
          'random_mean': float(np.mean(population))}


def _in_window(plan: 'Plan', cost: Optional[float]) -> bool:
  return plan.window is None or candidates_lib.inside(cost, plan.window)


def _search_entries(plan: 'Plan', entries: Dict[str, Dict[str, Any]]
                    ) -> List[Dict[str, Any]]:
  randoms = _of_kind(entries, candidates_lib.RANDOM)
  out = []
  for index, search in enumerate(plan.searches):
    own = [e for e in _of_kind(entries, candidates_lib.OWN_COST)
           if e['search'] == index]
    for cid in search['candidates']:
      e = entries[cid]
      item = {'search': index, 'model_dir': search['model_dir'],
              'candidate': cid, 'rules': list(e['rules']), 'cost': e['cost'],
              'cost_error': None if plan.target is None or e['cost'] is None
              else abs(e['cost'] - plan.target),
              'in_window': _in_window(plan, e['cost']),
              'settling': next(iter(search['choices'].values()))['settling']}
      # Own-cost random ones were drawn around this candidate's cost only
      # if it missed the target's window (`candidates.own_cost_candidates`).
      at_own = [o for o in own if candidates_lib.inside(e['cost'],
                                                       o['window'])]
      for split in SPLITS:
        item[f'vs_random_{split}'] = _versus(e['compared'][split],
                                             _values(randoms, split))
        item[f'vs_own_cost_{split}'] = _versus(e['compared'][split],
                                               _values(at_own, split))
      out.append(item)
  return out


def _references(entries: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Reference networks, each on its own row: never pooled."""
  randoms = _of_kind(entries, candidates_lib.RANDOM)
  return [dict({'candidate': e['id'], 'cost': e['cost']}, **{
      f'vs_random_{split}': _versus(e['compared'][split],
                                    _values(randoms, split))
      for split in SPLITS})
          for e in _of_kind(entries, candidates_lib.REFERENCE)]


def _pooled(plan: 'Plan', entries: Dict[str, Dict[str, Any]],
            noise: Dict[str, Any], seed: int,
            decisive_difference: float) -> Dict[str, Any]:
  """Searched (one per search and rule) against random, per split, and the
  verdict. A searched architecture outside the target's window is left out
  (`left_out`): it is compared only with random ones of its own cost."""
  rules = sorted({r for s in plan.searches for r in s['choices']})
  randoms = [e for e in _of_kind(entries, candidates_lib.RANDOM)
             if e['compared'][HEADLINE] is not None]
  out = {}
  for rule in rules:
    searched = [e for e in _of_kind(entries, candidates_lib.SEARCHED)
                if rule in e['rules'] and e['compared'][HEADLINE] is not None]
    pooled = [e for e in searched if _in_window(plan, e['cost'])]
    item = {'searched': [e['id'] for e in pooled],
            'random': [e['id'] for e in randoms],
            'left_out': [{'candidate': e['id'], 'cost': e['cost']}
                         for e in searched if e not in pooled]}
    for split in SPLITS:
      a, b = _values(pooled, split), _values(randoms, split)
      test = stats.mann_whitney(a, b, seed=seed)
      n = noise[split]
      points = (lambda v: None if v is None else 100 * v)
      item[split] = dict(test, searched_values=a, random_values=b,
                         verdict=verdict_lib.decide(
                             [100 * v for v in a], [100 * v for v in b],
                             p_value=test['p_value'],
                             seeds=max(1, noise['seeds_compared']),
                             seed_std=points(n['seed_std']),
                             architecture_std_upper=points(
                                 n['random_architecture_std_upper']),
                             decisive_difference=decisive_difference,
                             seed=seed))
    out[rule] = item
  return out


def _correlations(plan: 'Plan', entries: Dict[str, Dict[str, Any]],
                  seed: int, resamples: int) -> List[Dict[str, Any]]:
  """One-shot (each supernet) against stand-alone accuracy, per split."""
  out = []
  for index, search in enumerate(plan.searches):
    for split in SPLITS:
      pairs = [(e['one_shot'][index], e['compared'][split])
               for e in noise_lib.distinct(entries)
               if e['one_shot'] is not None and e['compared'][split]
               is not None]
      x = [p[0] for p in pairs]
      y = [p[1] for p in pairs]
      item = {'search': index, 'model_dir': search['model_dir'],
              'split': split, 'n': len(pairs)}
      for name, fn in (('kendall_tau', stats.kendall_tau_b),
                       ('spearman_rho', stats.spearman_rho)):
        value = fn(x, y) if len(pairs) >= 2 else float('nan')
        item[name] = None if math.isnan(value) else value
        item[f'{name}_interval'] = stats.interval_list(
            stats.bootstrap_interval(fn, x, y, num_resamples=resamples,
                                     seed=candidates_lib.derived_seed(
                                         seed, 100 + index)))
      out.append(item)
  return out


def build(plan: 'Plan', scores: Dict[str, List[float]],
          runs: Dict[str, List[Dict[str, Any]]], *, seeds: int, seed: int,
          bootstrap_resamples: int,
          decisive_difference: float = verdict_lib.DECISIVE_DIFFERENCE
          ) -> Dict[str, Any]:
  """The report of what is finished, as one JSON-ready dict.

  Args:
    plan: the evaluation's plan.
    scores: candidate id -> one-shot accuracy under each search's supernet.
    runs: candidate id -> its finished trainings (`job` result dicts).
    seeds: trainings planned per candidate (progress only; the statistics
      use the finished ones).
    seed: the evaluation's seed (bootstrap, Monte Carlo, power streams).
    bootstrap_resamples: resamples per correlation interval.
    decisive_difference: points of top-1 a decisive null result must
      detect (`verdict.decide`).
  """
  entries = {c.id: _candidate_entry(c, scores, runs) for c in plan.candidates}
  compared = noise_lib.compared_runs(entries)
  for e in entries.values():
    e['compared'] = {split: _compared_value(e, split, compared)
                     for split in SPLITS}
  noise = noise_lib.noise(entries, compared)
  pooled = _pooled(plan, entries, noise, seed, decisive_difference)
  distinct = noise_lib.distinct(entries)
  done = sum(len(e['runs']) for e in distinct)
  return {
      'search_space': plan.search_space, 'cost_model': plan.cost_model,
      'unit': plan.unit, 'target': plan.target,
      'window': None if plan.window is None else list(plan.window),
      'headline_split': HEADLINE,
      'verdict': {rule: {'split': HEADLINE,
                         'kind': item[HEADLINE]['verdict']['kind'],
                         'text': item[HEADLINE]['verdict']['text']}
                  for rule, item in pooled.items()},
      'progress': {'trainings_done': done,
                   'trainings_total': seeds * len(distinct),
                   'one_shot_done': len(scores),
                   'one_shot_total': len(entries)},
      'candidates': list(entries.values()),
      'searches': _search_entries(plan, entries),
      'references': _references(entries),
      'searched_vs_random': pooled,
      'one_shot_vs_standalone': _correlations(plan, entries, seed,
                                              bootstrap_resamples),
      'noise': noise,
  }


def headline(built: Dict[str, Any]) -> List[str]:
  """The verdict of each rule on the test split (the figure's title too)."""
  return [f'verdict ({rule}, {HEADLINE} split): '
          f'{by_split[HEADLINE]["verdict"]["text"]}'
          for rule, by_split in built['searched_vs_random'].items()]


def _pct(value: Optional[float], digits: int = 2) -> str:
  return '-' if value is None else f'{100 * value:.{digits}f}'


def _spread(summary: Dict[str, Any]) -> str:
  if not summary['n']:
    return '-'
  std = '' if summary['std'] is None else f' +-{100 * summary["std"]:.2f}'
  return f'{100 * summary["mean"]:.2f}{std} ({summary["n"]})'


# Up to this many supernets the table prints each one-shot score; beyond,
# their mean +-std (the scores are in the JSON and the correlation lines).
ONE_SHOT_COLUMNS = 2


def _one_shot_text(scores: Optional[List[float]]) -> str:
  if scores is None:
    return '-'
  if len(scores) <= ONE_SHOT_COLUMNS:
    return ' '.join(_pct(a, 1) for a in scores)
  return _spread(stats.summary(scores))


def _table(built: Dict[str, Any]) -> List[str]:
  unit = built['unit']
  rows = [(e['id'], e['kind'],
           '-' if e['cost'] is None else f'{e["cost"]:.2f}',
           _one_shot_text(e['one_shot']), _spread(e['test']),
           _spread(e['validation'])) for e in built['candidates']]
  head = ('candidate', 'kind', 'cost ' + unit, 'one-shot %', 'test %',
          'validation %')
  # Every column as wide as its widest cell: one never runs into the next.
  width = [max(len(r[i]) for r in rows + [head]) + 2 for i in range(6)]
  lines = []
  for r in [head] + rows:
    lines.append(''.join(
        f'{cell:>{w - 2}}  ' if i == 2 else f'{cell:<{w}}'
        for i, (cell, w) in enumerate(zip(r, width))).rstrip())
  return lines


def _versus_text(v: Optional[Dict[str, Any]]) -> str:
  if v is None:
    return '-'
  return (f'rank {v["rank"]} of {v["of"]}, beats {v["percentile"]:.0f}%, '
          f'p={v["p_value"]:.3f}')


def _settling_text(s: Dict[str, Any], unit: str) -> str:
  text = (f'  controller: entropy {s["entropy"]:.1f} of '
          f'{s["uniform_entropy"]:.1f} nats, {s["settled_decisions"]} of '
          f'{s["decisions"]} decisions settled, median top probability '
          f'{s["median_max_probability"]:.2f}')
  costs = s['sampled_costs']
  if costs is not None and s.get('argmax_cost') is not None:
    text += (f'; its samples cost {costs["mean"]:.4g} +-{costs["std"]:.2g} '
             f'{unit}, its argmax {s["argmax_cost"]:.4g} {unit} (more than '
             f'{s["argmax_cost_percentile"]:.0f}% of them)')
  return text


def warnings(built: Dict[str, Any]) -> List[str]:
  """One line per searched architecture left out of the pooled test."""
  window = built['window']
  seen, out = set(), []
  for item in built['searched_vs_random'].values():
    for left in item['left_out']:
      if left['candidate'] not in seen:
        seen.add(left['candidate'])
        cost = '-' if left['cost'] is None else f'{left["cost"]:.2f}'
        out.append(f'warning: {left["candidate"]} ({cost} {built["unit"]}) '
                   f'lies outside the target window {window[0]:.2f}-'
                   f'{window[1]:.2f} {built["unit"]}: left out of the pooled '
                   'test, compared only with random architectures of its '
                   'own cost')
  return out


def _search_lines(built: Dict[str, Any]) -> List[str]:
  lines, shown = [], set()
  for s in built['searches']:
    if s['search'] not in shown:
      shown.add(s['search'])
      lines.append(f'search {s["search"]} ({s["model_dir"]}):')
      lines.append(_settling_text(s['settling'], built['unit']))
    error = ('' if s['cost_error'] is None
             else f', |cost - target| {s["cost_error"]:.2f} {built["unit"]}')
    lines.append(f' {"/".join(s["rules"])}: {s["candidate"]}{error}')
    for split in SPLITS:
      lines.append(f'  {split:<10} vs random at the target: '
                   f'{_versus_text(s["vs_random_" + split])}; at its own '
                   f'cost: {_versus_text(s["vs_own_cost_" + split])}')
  for r in built['references']:
    lines.append(f'reference {r["candidate"]} (own row, not pooled): test '
                 f'{_versus_text(r["vs_random_test"])}; validation '
                 f'{_versus_text(r["vs_random_validation"])}')
  for rule, item in built['searched_vs_random'].items():
    for split in SPLITS:  # Not the dict's order: JSON sorts the keys.
      m = item[split]
      if not math.isnan(m['p_value']):
        lines.append(
            f'searched ({rule}) vs random, {split}: P(searched beats random)'
            f' = {m["probability_of_superiority"]:.2f}, U = {m["u"]:g}, '
            f'one-sided exact Mann-Whitney p = {m["p_value"]:.3f} '
            f'({int(m["n_a"])} vs {int(m["n_b"])})')
  return lines


def _interval(values: List[Optional[float]]) -> str:
  if values[0] is None:
    return '[-]'
  return f'[{values[0]:.2f}, {values[1]:.2f}]'


def _bounded(value: Optional[float], upper: Optional[float], scale: float,
             what: str) -> str:
  """A floored estimate beside its upper bound: never a bare 0.00."""
  if value is None:
    return '-'
  return f'{scale * value:.2f} ({what} {scale * upper:.2f})'


def _noise_lines(built: Dict[str, Any]) -> List[str]:
  n = built['noise']
  if n['test']['seed_std'] is None:
    lines = ['seed noise not measured yet (it needs two finished runs of '
             'two candidates)']
    for rule, item in built['searched_vs_random'].items():
      v = item[HEADLINE]['verdict']
      if v.get('spread_source') == 'random_values':
        lines.append(
            f'random architectures\' values ({rule}, {HEADLINE}) scatter by '
            f'{v["random_values_std"]:.2f} points (std of {v["n_random"]}, '
            f'seed noise included; {100 * v["spread_level"]:.0f}% upper '
            f'bound {v["random_values_std_upper"]:.2f}): the power of the '
            'verdict uses it')
    return lines
  t, v = n['test'], n['validation']
  level = f'{100 * t["bound_level"]:.0f}% upper bound'
  table = t['table']
  return [
      f'seed noise (one training; residual of {len(table["candidates"])} '
      f'candidates x {table["runs"]} runs that share run seeds): test '
      f'{_pct(t["seed_std"])}, validation {_pct(v["seed_std"])} points; '
      f'the shared run seed moves every candidate by test '
      f'{_pct(t["run_std"])}, validation {_pct(v["run_std"])} points',
      f'random architectures differ by (std, seed noise and run effect '
      f'removed; {level}): test '
      + _bounded(t['random_architecture_std'],
                 t['random_architecture_std_upper'], 100, 'upper bound')
      + ', validation '
      + _bounded(v['random_architecture_std'],
                 v['random_architecture_std_upper'], 100, 'upper bound')
      + ' points',
      f'ceiling of a one-shot Kendall tau against means of '
      f'{n["seeds_compared"]} seeds (a perfect predictor; reliability of '
      f'those means, normal model): test '
      + _bounded(t['tau_ceiling'], t['tau_ceiling_upper'], 1, 'at most')
      + ', validation '
      + _bounded(v['tau_ceiling'], v['tau_ceiling_upper'], 1, 'at most'),
      'single trainings agree at Kendall tau '
      + ('-' if n['seed_vs_seed_kendall_tau'] is None
         else f'{n["seed_vs_seed_kendall_tau"]:.2f}')
      + ' between seeds (validation)']


def _correlation_lines(built: Dict[str, Any]) -> List[str]:
  lines = []
  for c in built['one_shot_vs_standalone']:
    tau = '-' if c['kendall_tau'] is None else f'{c["kendall_tau"]:.2f}'
    rho = '-' if c['spearman_rho'] is None else f'{c["spearman_rho"]:.2f}'
    lines.append(f'one-shot (supernet {c["search"]}) vs stand-alone '
                 f'{c["split"]}: Kendall tau {tau} '
                 f'{_interval(c["kendall_tau_interval"])}, Spearman rho '
                 f'{rho} {_interval(c["spearman_rho_interval"])} ({c["n"]} '
                 'candidates, 95% bootstrap)')
  return lines


def _verdict_lines(built: Dict[str, Any]) -> List[str]:
  lines = headline(built)
  for rule, by_split in built['searched_vs_random'].items():
    lines.append(f'  beside it, validation ({rule}; the split the '
                 'controller\'s rewards came from): '
                 f'{by_split["validation"]["verdict"]["text"]}')
  return lines


def format_text(built: Dict[str, Any]) -> str:
  """The report as text: the verdict, the table, then the comparisons."""
  p = built['progress']
  window = built['window']
  head = [f'Search evaluation of {built["search_space"]}: '
          f'{p["trainings_done"]} of {p["trainings_total"]} trainings and '
          f'{p["one_shot_done"]} of {p["one_shot_total"]} one-shot scores '
          f'done; compared on {built["noise"]["seeds_compared"]} finished '
          'seeds per candidate']
  if window is not None:
    head.append(f'target {built["target"]:g} {built["unit"]} '
                f'({built["cost_model"]}), random window '
                f'{window[0]:.2f}-{window[1]:.2f} {built["unit"]}; '
                'accuracies: mean +-std over seeds (runs); one-shot: '
                f'each supernet\'s, or beyond {ONE_SHOT_COLUMNS} their '
                'mean +-std (supernets)')
  return '\n'.join(head + _verdict_lines(built) + warnings(built) + ['']
                   + _table(built) + [''] + _search_lines(built) + ['']
                   + _correlation_lines(built) + _noise_lines(built))
