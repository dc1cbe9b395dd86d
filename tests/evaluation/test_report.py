"""Tests for tunas_search.evaluation.report on a hand-made evaluation.

Two searches with a target of 84 ms: search 0 lands in the 83-85 ms window,
search 1 at 90 ms with two random architectures drawn at its own cost; four
random architectures in the window; two seeds each. No TensorFlow.
"""

import math
import subprocess
import sys
import types

import numpy as np
import pytest

from tunas_search.evaluation import candidates
from tunas_search.evaluation import report
from tunas_search.evaluation import stats

C = candidates.Candidate
VALIDATION = {
    'searched-0-auto': [0.86, 0.88], 'searched-1-auto': [0.85, 0.85],
    'random-00': [0.84, 0.86], 'random-01': [0.80, 0.82],
    'random-02': [0.83, 0.83], 'random-03': [0.90, 0.88],
    'own-1-00': [0.86, 0.86], 'own-1-01': [0.84, 0.82]}
ONE_SHOT = {'searched-0-auto': [0.60, 0.50], 'searched-1-auto': [0.58, 0.52],
            'random-00': [0.55, 0.51], 'random-01': [0.40, 0.45],
            'random-02': [0.50, 0.47], 'random-03': [0.62, 0.40],
            'own-1-00': [0.57, 0.49], 'own-1-01': [0.52, 0.48]}


def settling():
  return {'entropy': 17.6, 'uniform_entropy': 35.7, 'settled_decisions': 15,
          'decisions': 58, 'median_max_probability': 0.8,
          'sampled_costs': {'mean': 89.9, 'std': 9.7}, 'argmax_cost': 90.8,
          'argmax_cost_percentile': 53.0}


def make_plan():
  own = candidates.window_around(90.0, 0.012)
  cands = [C('searched-0-auto', 'searched', '0:0', 'a', 84.5, 0, ('auto',)),
           C('searched-1-auto', 'searched', '0:1', 'b', 90.0, 1, ('auto',))]
  cands += [C(f'random-0{i}', 'random', f'1:{i}', 'r', 83.5 + 0.2 * i,
              window=(83.0, 85.0)) for i in range(4)]
  cands += [C(f'own-1-0{i}', 'random_own_cost', f'2:{i}', 'o', 90.2, 1,
              window=own) for i in range(2)]
  searches = [{'model_dir': f'/s{i}', 'step': 3000, 'candidates':
               [f'searched-{i}-auto'],
               'choices': {'auto': {'settling': settling()}}}
              for i in range(2)]
  return types.SimpleNamespace(
      search_space='space', cost_model='pixel1_latency', unit='ms',
      target=84.0, window=(83.0, 85.0), searches=searches, candidates=cands)


def runs(values):
  return [{'run': r, 'validation': v, 'test': v - 0.01}
          for r, v in enumerate(values)]


@pytest.fixture(scope='module')
def built():
  return report.build(make_plan(), ONE_SHOT,
                      {k: runs(v) for k, v in VALIDATION.items()}, seeds=2,
                      seed=0, bootstrap_resamples=200)


def test_searches_against_random_at_target_and_own_cost(built):
  first, second = built['searches']
  # 0.87 among 0.85, 0.81, 0.83, 0.89: one above, three below.
  assert first['vs_random_validation'] == {
      'rank': 2, 'of': 5, 'percentile': pytest.approx(75.0),
      'probability_beats_random': pytest.approx(0.75),
      'p_value': pytest.approx(2 / 5), 'random_mean': pytest.approx(0.845)}
  assert first['vs_own_cost_validation'] is None  # It hit the window.
  assert first['cost_error'] == pytest.approx(0.5)
  # 0.85: 0.89 above, 0.85 tied (half), two below; ties count against it.
  v = second['vs_random_validation']
  assert (v['rank'], v['percentile'], v['p_value']) == (
      2, pytest.approx(62.5), pytest.approx(3 / 5))
  # At its own cost: 0.86 above, 0.83 below.
  v = second['vs_own_cost_validation']
  assert (v['rank'], v['of'], v['percentile'], v['p_value']) == (
      2, 3, pytest.approx(50.0), pytest.approx(2 / 3))
  assert second['cost_error'] == pytest.approx(6.0)
  assert second['vs_random_test']['rank'] == 2


def test_pooled_comparison_leaves_out_a_search_outside_the_window(built):
  item = built['searched_vs_random']['auto']
  assert item['searched'] == ['searched-0-auto']
  assert item['left_out'] == [{'candidate': 'searched-1-auto', 'cost': 90.0}]
  pooled = item['validation']
  # 0.87 beats three of 0.85, 0.81, 0.83, 0.89: U = 3 of 4.
  assert pooled['u'] == pytest.approx(3)
  assert pooled['probability_of_superiority'] == pytest.approx(3 / 4)
  assert pooled['p_value'] == pytest.approx(stats.mann_whitney(
      [0.87], [0.85, 0.81, 0.83, 0.89])['p_value'])
  assert pooled['searched_values'] == [pytest.approx(0.87)]
  (line,) = report.warnings(built)
  assert line == ('warning: searched-1-auto (90.00 ms) lies outside the '
                  'target window 83.00-85.00 ms: left out of the pooled test, '
                  'compared only with random architectures of its own cost')


def test_headline_is_the_test_split_with_validation_beside(built):
  text = report.format_text(built)
  lines = text.splitlines()
  assert lines[2].startswith('verdict (auto, test split): mean difference ')
  assert lines[3].startswith('  beside it, validation (auto; the split the '
                             "controller's rewards came from): ")
  verdict = built['searched_vs_random']['auto']['test']['verdict']
  assert built['verdict'] == {'auto': {'split': 'test', 'kind': 'undecided',
                                       'text': verdict['text']}}
  assert verdict['kind'] == 'undecided'  # 1 vs 4 cannot reach 5%.
  assert '1 vs 4 cannot reach p <= 0.05' in verdict['text']


def test_correlations_and_noise(built):
  means = [sum(v) / 2 for v in VALIDATION.values()]
  for c in built['one_shot_vs_standalone']:
    x = [s[c['search']] for s in ONE_SHOT.values()]
    y = means if c['split'] == 'validation' else [m - 0.01 for m in means]
    assert c['n'] == 8
    assert c['kendall_tau'] == pytest.approx(stats.kendall_tau_b(x, y))
    assert c['spearman_rho'] == pytest.approx(stats.spearman_rho(x, y))
    low, high = c['kendall_tau_interval']
    assert -1 <= low <= c['kendall_tau'] <= high <= 1
  noise = built['noise']
  assert noise['seeds_compared'] == 2
  table = [VALIDATION[k] for k in VALIDATION]
  d = stats.two_way(table, population=[2, 3, 4, 5])
  v = noise['validation']
  assert v['seed_std'] == pytest.approx(d.seed_std)
  assert v['random_architecture_std'] == pytest.approx(d.architecture_std)
  assert v['random_architecture_std_upper'] == pytest.approx(
      d.architecture_std_upper)
  assert v['tau_ceiling'] == pytest.approx(
      stats.tau_ceiling(d.architecture_std, d.seed_std, 2))
  assert noise['seed_vs_seed_kendall_tau'] == pytest.approx(
      stats.seed_vs_seed_tau(list(VALIDATION.values())))


def counted(correct, examples=3):
  """Runs whose stored accuracies carry float32 rounding; counts tie."""
  return [{'run': r, 'validation': float(np.float32(c / examples)),
           'test': float(np.float32(c / examples)),
           'validation_examples': examples, 'test_examples': examples}
          for r, c in enumerate(correct)]


def test_ties_are_counts_and_partial_reports_use_finished_runs():
  plan = make_plan()
  found = {'searched-0-auto': counted([1, 2]), 'random-00': counted([2, 1]),
           'random-01': counted([0, 0]), 'random-02': counted([3])}
  b = report.build(plan, {}, found, seeds=2, seed=0, bootstrap_resamples=20)
  # random-02 has finished run 0 only: everything is compared on run 0.
  assert b['noise']['seeds_compared'] == 1
  assert b['noise']['runs_compared'] == [0]
  entries = {e['id']: e for e in b['candidates']}
  assert entries['searched-0-auto']['validation_correct'] == [1, 2]
  assert entries['random-02']['compared']['test'] == 1.0
  # With both runs of the first three: 1.5 correct of 3 for both, a tie.
  found['random-02'] = counted([3, 3])
  b = report.build(plan, {}, found, seeds=2, seed=0, bootstrap_resamples=20)
  entries = {e['id']: e for e in b['candidates']}
  assert (entries['searched-0-auto']['compared']['test'] ==
          entries['random-00']['compared']['test'] == 0.5)
  pooled = b['searched_vs_random']['auto']['test']
  # Ties count half: beats random-01, ties random-00, below random-02.
  assert pooled['u'] == 1.5
  assert b['progress']['trainings_done'] == 8


def test_the_json_recomputes_u_p_and_the_verdict(built):
  from tunas_search.evaluation import verdict  # pylint: disable=g-import-not-at-top
  item = built['searched_vs_random']['auto']
  entries = {e['id']: e for e in built['candidates']}
  for split in report.SPLITS:
    a = [entries[i]['compared'][split] for i in item['searched']]
    b = [entries[i]['compared'][split] for i in item['random']]
    again = stats.mann_whitney(a, b)
    assert again['u'] == item[split]['u']
    assert again['p_value'] == item[split]['p_value']
    n = built['noise'][split]
    v = verdict.decide([100 * x for x in a], [100 * x for x in b],
                       p_value=again['p_value'],
                       seeds=built['noise']['seeds_compared'],
                       seed_std=100 * n['seed_std'],
                       architecture_std_upper=100 * n[
                           'random_architecture_std_upper'])
    assert v['text'] == item[split]['verdict']['text']


def test_reference_nets_have_their_own_row():
  plan = make_plan()
  plan.candidates.append(C('ref-proxylessnas_mobile', 'reference', '3:0',
                           'p', 84.4))
  values = dict(VALIDATION, **{'ref-proxylessnas_mobile': [0.95, 0.95]})
  b = report.build(plan, ONE_SHOT, {k: runs(v) for k, v in values.items()},
                   seeds=2, seed=0, bootstrap_resamples=20)
  (ref,) = b['references']
  assert ref['vs_random_validation']['rank'] == 1
  item = b['searched_vs_random']['auto']
  assert 'ref-proxylessnas_mobile' not in item['searched'] + item['random']
  assert ('reference ref-proxylessnas_mobile (own row, not pooled): test rank '
          '1 of 5') in report.format_text(b)


def test_partial_report_and_text():
  partial = report.build(make_plan(), {'random-00': [0.5, 0.5]},
                         {'random-00': runs([0.84])}, seeds=2, seed=0,
                         bootstrap_resamples=50)
  assert partial['progress'] == {'trainings_done': 1, 'trainings_total': 16,
                                 'one_shot_done': 1, 'one_shot_total': 8}
  text = report.format_text(partial)
  assert text.startswith('Search evaluation of space: 1 of 16 trainings and '
                         '1 of 8 one-shot scores done; compared on 1 finished '
                         'seeds per candidate')
  assert 'seed noise not measured yet' in text
  assert 'undecided at this budget' in text
  line = next(l for l in text.splitlines() if l.startswith('random-00'))
  assert line.split()[2:5] == ['83.50', '50.0', '50.0']
  assert '84.00 (1)' in line


def test_table_columns_stay_apart_with_many_supernets():
  # Five searches: five one-shot scores per candidate used to run into the
  # test column ('50.8 53.1 50.8 37.5 40.682.60 (1)').
  plan = make_plan()
  plan.searches = [dict(plan.searches[0], model_dir=f'/s{i}')
                   for i in range(5)]
  scores = {k: [v[0], v[1], v[0], v[1] - 0.1, v[0]]
            for k, v in ONE_SHOT.items()}
  b = report.build(plan, scores, {k: runs(v[:1]) for k, v in
                                  VALIDATION.items()}, seeds=1, seed=0,
                   bootstrap_resamples=20)
  text = report.format_text(b)
  lines = text.splitlines()
  head = next(i for i, l in enumerate(lines) if l.startswith('candidate'))
  line = next(l for l in lines if l.startswith('random-01'))
  cells = [c.strip() for c in line.split('  ') if c.strip()]
  one_shot = stats.summary(scores['random-01'])
  assert cells[3] == (f'{100 * one_shot["mean"]:.2f} '
                      f'+-{100 * one_shot["std"]:.2f} (5)')
  assert cells[4] == '79.00 (1)' and cells[5] == '80.00 (1)'
  # Each cell starts where its header does.
  header = lines[head]
  for name, cell in (('one-shot %', cells[3]), ('test %', cells[4])):
    assert line.index(cell) == header.index(name)


def test_one_seed_report_powers_from_the_random_values(built):
  # One finished seed each, no run table: the verdict still sizes its power
  # (from the random values' spread) and the text says where it came from.
  b = report.build(make_plan(), ONE_SHOT, {k: runs(v[:1]) for k, v in
                                           VALIDATION.items()}, seeds=1,
                   seed=0, bootstrap_resamples=20)
  v = b['searched_vs_random']['auto']['test']['verdict']
  assert b['noise']['test']['seed_std'] is None
  assert v['spread_source'] == 'random_values'
  randoms = [100 * x for x in b['searched_vs_random']['auto']['test'][
      'random_values']]
  assert v['random_values_std'] == pytest.approx(np.std(randoms, ddof=1))
  assert v['detectable_difference'] is not None
  text = report.format_text(b)
  assert ("random architectures' values (auto, test) scatter by "
          f'{v["random_values_std"]:.2f} points (std of 4') in text
  assert built['searched_vs_random']['auto']['test']['verdict'][
      'spread_source'] == 'run_table'


def test_text_of_a_full_report(built):
  text = report.format_text(built)
  assert ('  validation vs random at the target: rank 2 of 5, beats 75%, '
          'p=0.400; at its own cost: -') in text
  assert ('searched (auto) vs random, test: P(searched beats random) = 0.75, '
          'U = 3, one-sided exact Mann-Whitney p = 0.400 (1 vs 4)') in text
  assert 'its argmax 90.8 ms (more than 53% of them)' in text
  assert 'removed; 90% upper bound): test ' in text


def test_a_floored_spread_is_printed_with_its_bound():
  # Candidate means that scatter less than the seed noise explains: the
  # spread's estimate floors at 0, its bound does not.
  plan = make_plan()
  values = dict(zip(VALIDATION, (
      [0.80, 0.84], [0.84, 0.80], [0.79, 0.83], [0.845, 0.805],
      [0.81, 0.85], [0.83, 0.79], [0.84, 0.80], [0.80, 0.84])))
  b = report.build(plan, {}, {k: runs(v) for k, v in values.items()},
                   seeds=2, seed=0, bootstrap_resamples=20)
  assert b['noise']['test']['random_architecture_std'] == 0.0
  upper = b['noise']['test']['random_architecture_std_upper']
  assert upper > 0
  assert f'test 0.00 (upper bound {100 * upper:.2f})' in report.format_text(b)


def test_no_tensorflow():
  code = ('import sys; from tunas_search.evaluation import report, verdict, '
          'power, figure; assert "tensorflow" not in sys.modules')
  subprocess.run([sys.executable, '-c', code], check=True)
