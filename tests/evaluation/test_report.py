"""Tests for tunas_search.evaluation.report on a hand-made evaluation.

Two searches with a target of 84 ms: search 0 lands in the 83-85 ms window,
search 1 at 90 ms with two random architectures drawn at its own cost; four
random architectures in the window; two seeds each. No TensorFlow.
"""

import math
import subprocess
import sys
import types

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


def test_pooled_comparison(built):
  pooled = built['searched_vs_random']['auto']['validation']
  # 0.87 beats three; 0.85 beats two and ties one: U = 5.5 of 8.
  assert pooled['u'] == pytest.approx(5.5)
  assert pooled['probability_of_superiority'] == pytest.approx(5.5 / 8)
  assert pooled['p_value'] == pytest.approx(stats.mann_whitney(
      [0.87, 0.85], [0.85, 0.81, 0.83, 0.89])['p_value'])


def test_correlations_and_noise(built):
  means = [sum(v) / 2 for v in VALIDATION.values()]
  for index, c in enumerate(built['one_shot_vs_standalone']):
    x = [s[index] for s in ONE_SHOT.values()]
    assert c['n'] == 8
    assert c['kendall_tau'] == pytest.approx(stats.kendall_tau_b(x, means))
    assert c['spearman_rho'] == pytest.approx(stats.spearman_rho(x, means))
    low, high = c['kendall_tau_interval']
    assert -1 <= low <= c['kendall_tau'] <= high <= 1
  noise = built['noise']
  # Five pairs differ by 0.02 (0.0002 each), three by 0: 0.001 over 8.
  assert noise['seed_std']['validation'] == pytest.approx(math.sqrt(0.001 / 8))
  assert noise['seed_vs_seed_kendall_tau'] == pytest.approx(
      stats.seed_vs_seed_tau(list(VALIDATION.values())))
  arch = stats.architecture_std([0.85, 0.81, 0.83, 0.89],
                                noise['seed_std']['validation'], 2)
  assert noise['random_architecture_std'] == pytest.approx(arch)
  spread = math.sqrt(arch ** 2 + noise['seed_std']['validation'] ** 2 / 2)
  assert noise['detectable_difference'] == pytest.approx(
      stats.detectable_difference(spread, 2, 4))


def test_partial_report_and_text():
  partial = report.build(make_plan(), {'random-00': [0.5, 0.5]},
                         {'random-00': runs([0.84])}, seeds=2, seed=0,
                         bootstrap_resamples=50)
  assert partial['progress'] == {'trainings_done': 1, 'trainings_total': 16,
                                 'one_shot_done': 1, 'one_shot_total': 8}
  text = report.format_text(partial)
  assert text.startswith('Search evaluation of space: 1 of 16 trainings and '
                         '1 of 8 one-shot scores done')
  assert 'seed noise not measured yet' in text
  line = next(l for l in text.splitlines() if l.startswith('random-00'))
  assert line.split()[2:5] == ['83.50', '50.0', '50.0']
  assert '84.00 (1)' in line


def test_text_of_a_full_report(built):
  text = report.format_text(built)
  assert ('  validation vs random at the target: rank 2 of 5, beats 75%, '
          'p=0.400; at its own cost: -') in text
  assert ('searched (auto) vs random, validation: P(searched beats random) '
          '= 0.69') in text
  assert 'its argmax 90.8 ms (more than 53% of them)' in text
  assert 'this comparison detects a difference of' in text


def test_plot_draws_both_panels(built, tmp_path):
  path = str(tmp_path / 'evaluation.png')
  assert report.plot(path, built)
  assert (tmp_path / 'evaluation.png').stat().st_size > 10000
  assert not (tmp_path / 'evaluation.png.tmp').exists()


def test_no_tensorflow_until_plotting():
  code = ('import sys; from tunas_search.evaluation import report; '
          'assert "tensorflow" not in sys.modules')
  subprocess.run([sys.executable, '-c', code], check=True)
