"""The report of a search evaluation: JSON, a text table and one figure.

`build` turns the plan and whatever work is finished into one JSON-ready
dict, so a partial evaluation reports what it has: per candidate its
one-shot scores and the mean and spread of its stand-alone accuracy over
seeds; per search where its architecture ranks among the random ones (at
the target's cost and at its own); the searched-vs-random comparison of all
searches together; the rank correlation of one-shot and stand-alone accuracy
beside the seed-vs-seed correlation of the stand-alone runs (its noise
ceiling); and the size of difference the comparison can detect. Rankings use
the held-out validation split; the test split is reported beside it.
"""

import math
import os
import tempfile
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import numpy as np

from tunas_search.evaluation import candidates as candidates_lib
from tunas_search.evaluation import stats

if TYPE_CHECKING:
  from tunas_search.evaluation.worklist import Plan  # pylint: disable=g-bad-import-order

JSON_FILENAME = 'evaluation.json'
TEXT_FILENAME = 'evaluation.txt'
FIGURE_FILENAME = 'evaluation.png'
SPLITS = ('validation', 'test')
# The difference the issue asks a comparison to detect: one point of top-1.
ONE_POINT = 0.01


def _means(entries: Sequence[Dict[str, Any]], split: str) -> List[float]:
  return [e[split]['mean'] for e in entries if e[split]['n']]


def _candidate_entry(candidate, scores, runs) -> Dict[str, Any]:
  entry = candidate.to_dict()
  entry['one_shot'] = scores.get(candidate.id)
  entry['runs'] = runs.get(candidate.id, [])
  for split in SPLITS:
    entry[split] = stats.summary([r[split] for r in entry['runs']])
  return entry


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


def _search_entries(plan: 'Plan', entries: Dict[str, Dict[str, Any]]
                    ) -> List[Dict[str, Any]]:
  randoms = [e for e in entries.values()
             if e['kind'] == candidates_lib.RANDOM]
  out = []
  for index, search in enumerate(plan.searches):
    own = [e for e in entries.values()
           if e['kind'] == candidates_lib.OWN_COST and e['search'] == index]
    for cid in search['candidates']:
      e = entries[cid]
      item = {'search': index, 'model_dir': search['model_dir'],
              'candidate': cid, 'rules': list(e['rules']), 'cost': e['cost'],
              'cost_error': None if plan.target is None or e['cost'] is None
              else abs(e['cost'] - plan.target),
              'settling': next(iter(search['choices'].values()))['settling']}
      # Own-cost random ones were drawn around this candidate's cost only
      # if it missed the target's window (`candidates.own_cost_candidates`).
      at_own = [o for o in own if candidates_lib.inside(e['cost'],
                                                       o['window'])]
      for split in SPLITS:
        item[f'vs_random_{split}'] = _versus(e[split]['mean'],
                                             _means(randoms, split))
        item[f'vs_own_cost_{split}'] = _versus(e[split]['mean'],
                                               _means(at_own, split))
      out.append(item)
  return out


def _pooled(plan: 'Plan', entries: Dict[str, Dict[str, Any]], seed: int
            ) -> Dict[str, Any]:
  """Searched (one per search and rule) against random, per split."""
  rules = sorted({r for s in plan.searches for r in s['choices']})
  randoms = [e for e in entries.values()
             if e['kind'] == candidates_lib.RANDOM]
  out = {}
  for rule in rules:
    searched = [e for e in entries.values()
                if e['kind'] == candidates_lib.SEARCHED and rule in e['rules']]
    out[rule] = {split: stats.mann_whitney(
        _means(searched, split), _means(randoms, split), seed=seed)
                 for split in SPLITS}
  return out


def _distinct(entries: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
  """One entry per architecture: candidates of one architecture share their
  scores and trainings (`job.owners`) and would count twice."""
  first: Dict[str, Dict[str, Any]] = {}
  for e in entries.values():
    first.setdefault(e['architecture'], e)
  return list(first.values())


def _correlations(plan: 'Plan', entries: Dict[str, Dict[str, Any]],
                  seed: int, resamples: int) -> List[Dict[str, Any]]:
  """One-shot (each supernet) against stand-alone validation accuracy."""
  out = []
  for index, search in enumerate(plan.searches):
    pairs = [(e['one_shot'][index], e['validation']['mean'])
             for e in _distinct(entries)
             if e['one_shot'] is not None and e['validation']['n']]
    x = [p[0] for p in pairs]
    y = [p[1] for p in pairs]
    item = {'search': index, 'model_dir': search['model_dir'],
            'n': len(pairs)}
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


def _noise(plan: 'Plan', entries: Dict[str, Dict[str, Any]], seeds: int
           ) -> Dict[str, Any]:
  """Seed noise, architecture spread and what the comparison can detect."""
  values = _distinct(entries)
  runs = [[r['validation'] for r in sorted(e['runs'], key=lambda r: r['run'])]
          for e in values]
  seed_std = {split: stats.pooled_seed_std(
      [[r[split] for r in e['runs']] for e in values]) for split in SPLITS}
  randoms = [e for e in entries.values()
             if e['kind'] == candidates_lib.RANDOM]
  arch_std = stats.architecture_std(_means(randoms, 'validation'),
                                    seed_std['validation'], seeds)
  num_searches = len(plan.searches)
  out = {'seed_vs_seed_kendall_tau': stats.seed_vs_seed_tau(runs),
         'seed_std': seed_std, 'random_architecture_std': arch_std,
         'seeds': seeds, 'detectable_difference': None,
         'seeds_for_one_point': None}
  if arch_std is not None and seed_std['validation'] is not None:
    spread = math.sqrt(arch_std ** 2 + seed_std['validation'] ** 2 / seeds)
    out['detectable_difference'] = stats.detectable_difference(
        spread, num_searches, len(randoms))
    out['seeds_for_one_point'] = stats.seeds_for(
        ONE_POINT, seed_std['validation'], arch_std, num_searches,
        len(randoms))
  return out


def build(plan: 'Plan', scores: Dict[str, List[float]],
          runs: Dict[str, List[Dict[str, Any]]], *, seeds: int, seed: int,
          bootstrap_resamples: int) -> Dict[str, Any]:
  """The report of what is finished, as one JSON-ready dict.

  Args:
    plan: the evaluation's plan.
    scores: candidate id -> one-shot accuracy under each search's supernet.
    runs: candidate id -> its finished trainings (`job` result dicts).
    seeds: trainings planned per candidate.
    seed: the evaluation's seed (bootstrap and Monte Carlo streams).
    bootstrap_resamples: resamples per correlation interval.
  """
  entries = {c.id: _candidate_entry(c, scores, runs) for c in plan.candidates}
  done = sum(len(e['runs']) for e in entries.values())
  return {
      'search_space': plan.search_space, 'cost_model': plan.cost_model,
      'unit': plan.unit, 'target': plan.target,
      'window': None if plan.window is None else list(plan.window),
      'progress': {'trainings_done': done,
                   'trainings_total': seeds * len(entries),
                   'one_shot_done': len(scores),
                   'one_shot_total': len(entries)},
      'candidates': list(entries.values()),
      'searches': _search_entries(plan, entries),
      'searched_vs_random': _pooled(plan, entries, seed),
      'one_shot_vs_standalone': _correlations(plan, entries, seed,
                                              bootstrap_resamples),
      'noise': _noise(plan, entries, seeds),
  }


def _pct(value: Optional[float], digits: int = 2) -> str:
  return '-' if value is None else f'{100 * value:.{digits}f}'


def _spread(summary: Dict[str, Any]) -> str:
  if not summary['n']:
    return '-'
  std = '' if summary['std'] is None else f' +-{100 * summary["std"]:.2f}'
  return f'{100 * summary["mean"]:.2f}{std} ({summary["n"]})'


def _table(built: Dict[str, Any]) -> List[str]:
  unit = built['unit']
  lines = [f'{"candidate":<22}{"kind":<17}{"cost " + unit:>9}  '
           f'{"one-shot %":<22}{"validation %":<20}{"test %":<20}']
  for e in built['candidates']:
    cost = '-' if e['cost'] is None else f'{e["cost"]:.2f}'
    shots = ('-' if e['one_shot'] is None
             else ' '.join(_pct(a, 1) for a in e['one_shot']))
    lines.append(f'{e["id"]:<22}{e["kind"]:<17}{cost:>9}  {shots:<22}'
                 f'{_spread(e["validation"]):<20}{_spread(e["test"]):<20}')
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
  for rule, by_split in built['searched_vs_random'].items():
    for split in SPLITS:  # Not the dict's order: JSON sorts the keys.
      m = by_split[split]
      if not math.isnan(m['p_value']):
        lines.append(
            f'searched ({rule}) vs random, {split}: P(searched beats random)'
            f' = {m["probability_of_superiority"]:.2f}, one-sided '
            f'Mann-Whitney p = {m["p_value"]:.3f} ({int(m["n_a"])} vs '
            f'{int(m["n_b"])})')
  return lines


def _interval(values: List[Optional[float]]) -> str:
  if values[0] is None:
    return '[-]'
  return f'[{values[0]:.2f}, {values[1]:.2f}]'


def _correlation_lines(built: Dict[str, Any]) -> List[str]:
  lines = []
  for c in built['one_shot_vs_standalone']:
    tau = '-' if c['kendall_tau'] is None else f'{c["kendall_tau"]:.2f}'
    rho = '-' if c['spearman_rho'] is None else f'{c["spearman_rho"]:.2f}'
    lines.append(f'one-shot (supernet {c["search"]}) vs stand-alone: '
                 f'Kendall tau {tau} {_interval(c["kendall_tau_interval"])},'
                 f' Spearman rho {rho} '
                 f'{_interval(c["spearman_rho_interval"])} ({c["n"]} '
                 'candidates, 95% bootstrap)')
  n = built['noise']
  ceiling = n['seed_vs_seed_kendall_tau']
  lines.append('seed vs seed (stand-alone, validation): Kendall tau '
               + ('-' if ceiling is None else f'{ceiling:.2f}')
               + ' (the noise ceiling of any rank correlation here)')
  std = n['seed_std']
  removed = ('seed noise removed' if std['validation'] is not None
             else 'seed noise not measured yet')
  lines.append(f'seed noise (std of one training): validation '
               f'{_pct(std["validation"])} points, test {_pct(std["test"])}'
               f' points; random architectures differ by '
               f'{_pct(n["random_architecture_std"])} points (std, '
               f'{removed})')
  if n['detectable_difference'] is not None:
    needed = n['seeds_for_one_point']
    lines.append(
        f'this comparison detects a difference of '
        f'{_pct(n["detectable_difference"])} points between searched and '
        f'random (80% power, one-sided 5%); one point needs '
        + (f'{needed} seeds per candidate' if needed else
           'more searches or random candidates, not more seeds'))
  return lines


def format_text(built: Dict[str, Any]) -> str:
  """The report as text: the table, then the comparisons."""
  p = built['progress']
  window = built['window']
  head = [f'Search evaluation of {built["search_space"]}: '
          f'{p["trainings_done"]} of {p["trainings_total"]} trainings and '
          f'{p["one_shot_done"]} of {p["one_shot_total"]} one-shot scores '
          'done']
  if window is not None:
    head.append(f'target {built["target"]:g} {built["unit"]} '
                f'({built["cost_model"]}), random window '
                f'{window[0]:.2f}-{window[1]:.2f} {built["unit"]}; '
                'accuracies: mean +-std over seeds (runs)')
  return '\n'.join(head + [''] + _table(built) + [''] + _search_lines(built)
                   + [''] + _correlation_lines(built))


def plot(path: str, built: Dict[str, Any],
         temporary: Optional[str] = None) -> bool:
  """Draws the figure to `path` (PNG) through `temporary` (default
  `path.tmp`); False, drawing nothing, without matplotlib (the `plot`
  extra)."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
  _plot_cost(left, built)
  _plot_one_shot(right, built)
  figure.tight_layout()
  # Drawn locally, then moved into place whole (the path may be gs://).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as local:
    drawn = os.path.join(local, FIGURE_FILENAME)
    figure.savefig(drawn, dpi=90)
    plt.close(figure)
    temporary = temporary or path + '.tmp'
    tf.io.gfile.copy(drawn, temporary, overwrite=True)
  tf.io.gfile.rename(temporary, path, overwrite=True)
  return True


_STYLE = {candidates_lib.RANDOM: ('o', 'C0', 'random (target window)'),
          candidates_lib.OWN_COST: ('s', 'C2', "random (a search's cost)"),
          candidates_lib.EXTRA: ('D', 'C4', 'extra'),
          candidates_lib.SEARCHED: ('*', 'C3', 'searched')}


def _plot_cost(ax, built: Dict[str, Any]) -> None:
  for kind, (marker, colour, label) in _STYLE.items():
    points = [e for e in built['candidates'] if e['kind'] == kind
              and e['validation']['n'] and e['cost'] is not None]
    if not points:
      continue
    ax.errorbar([e['cost'] for e in points],
                [100 * e['validation']['mean'] for e in points],
                yerr=[100 * (e['validation']['std'] or 0) for e in points],
                fmt=marker, color=colour, label=label,
                markersize=14 if kind == candidates_lib.SEARCHED else 6)
    if kind == candidates_lib.SEARCHED:
      for e in points:
        ax.annotate(e['id'].replace('searched-', ''),
                    (e['cost'], 100 * e['validation']['mean']), fontsize=7,
                    xytext=(4, 4), textcoords='offset points')
  if built['window'] is not None:
    ax.axvspan(*built['window'], color='0.9', zorder=0)
  ax.set_xlabel(f'cost ({built["cost_model"]}, {built["unit"]})')
  ax.set_ylabel('stand-alone top-1, validation (%)')
  ax.legend(fontsize=7)
  ax.set_title('stand-alone accuracy vs cost (mean +-std over seeds)',
               fontsize=9)


def _plot_one_shot(ax, built: Dict[str, Any]) -> None:
  for c in built['one_shot_vs_standalone']:
    index = c['search']
    points = [e for e in built['candidates']
              if e['one_shot'] is not None and e['validation']['n']]
    tau = '-' if c['kendall_tau'] is None else f'{c["kendall_tau"]:.2f}'
    ax.scatter([100 * e['one_shot'][index] for e in points],
               [100 * e['validation']['mean'] for e in points], s=14,
               color=f'C{index}', label=f'supernet {index} (tau {tau})')
  ax.set_xlabel('one-shot top-1 with inherited weights (%)')
  ax.set_ylabel('stand-alone top-1, validation (%)')
  ax.legend(fontsize=7)
  ax.set_title('one-shot vs stand-alone accuracy', fontsize=9)
