"""Tests of bench/evaluation_sizing.py on hand-made pilot evaluations.

Two pilots of one design at two stand-alone budgets: at the short one the
architectures are indistinguishable, at the long one they differ. The
sizing recomputes the decomposition from the per-candidate runs and sizes
the decisive design by the power simulation.
"""

import json

import numpy as np
import pytest

from tests import files
from tests.evaluation import test_report
from tunas_search.evaluation import power
from tunas_search.evaluation import report


@pytest.fixture(scope='module')
def sizing():
  return files.load_script('bench', 'evaluation_sizing.py')


def pilot(tmp_path, name, spread, steps):
  """An evaluation dir: the hand-made plan, 3 runs of counts of 2,000."""
  rng = np.random.default_rng(len(name))
  runs = {}
  for c in test_report.make_plan().candidates:
    true = 0.8 + rng.normal(0, spread)
    runs[c.id] = [{'run': r, 'validation': v, 'test': v,
                   'validation_examples': 2000, 'test_examples': 2000}
                  for r, v in enumerate(
                      np.round((true + rng.normal(0, 0.0125, 3)) * 2000)
                      / 2000)]
  built = report.build(test_report.make_plan(), {}, runs, seeds=3, seed=0,
                       bootstrap_resamples=10)
  directory = tmp_path / name
  directory.mkdir()
  (directory / report.JSON_FILENAME).write_text(json.dumps(built))
  (directory / 'config.json').write_text(json.dumps(
      {'train_steps': steps, 'epochs': 90.0, 'train_batch_size': 64}))
  return str(directory), built


def test_sizes_each_budget_from_the_per_candidate_runs(sizing, tmp_path,
                                                       capsys):
  short, built = pilot(tmp_path, 'short', 0.0, 1000)
  long, _ = pilot(tmp_path, 'long-budget', 0.03, 6000)
  assert sizing.main([f'--evaluation={short}', f'--evaluation={long}',
                      '--num_random=12,20']) == 0
  out = json.loads(capsys.readouterr().out)
  first, second = out['budgets']
  assert (first['train_steps'], second['train_steps']) == (1000, 6000)
  noise = built['noise']['test']
  assert first['seed_std_points'] == pytest.approx(100 * noise['seed_std'])
  assert first['spread_upper_points'] == pytest.approx(
      100 * noise['random_architecture_std_upper'])
  assert second['spread_points'] > first['spread_points']
  design = first['decisive']['design']
  assert design == power.needs(1.0, n_random=[12, 20],
                               seed_std=first['seed_std_points'],
                               architecture_std=first['spread_upper_points'])
  if design is not None:
    assert design['power'] >= 0.8
  # The pilot's own design: its two searched against its four random.
  assert first['detectable_now_points'] == pytest.approx(
      power.detectable_difference(
          n_searched=2, n_random=4, seeds=3,
          seed_std=first['seed_std_points'],
          architecture_std=first['spread_upper_points']))


def test_a_pilot_without_a_second_seed_says_so(sizing, tmp_path, capsys):
  plan = test_report.make_plan()
  built = report.build(plan, {}, {'random-00': test_report.runs([0.8])},
                       seeds=2, seed=0, bootstrap_resamples=10)
  path = tmp_path / report.JSON_FILENAME
  path.write_text(json.dumps(built))
  assert sizing.main([f'--evaluation={path}']) == 0
  (only,) = json.loads(capsys.readouterr().out)['budgets']
  assert only['decisive'] is None and 'not measured' in only['note']
  assert only['train_steps'] is None


def test_a_one_seed_evaluation_is_sized_from_the_random_values(
    sizing, tmp_path, capsys):
  # One run per candidate: no run table, so the spread is the random values'
  # own (seed noise included), as the report's verdict sizes it.
  built = report.build(test_report.make_plan(), {}, {
      k: test_report.runs(v[:1]) for k, v in test_report.VALIDATION.items()},
                       seeds=1, seed=0, bootstrap_resamples=10)
  path = tmp_path / report.JSON_FILENAME
  path.write_text(json.dumps(built))
  assert sizing.main([f'--evaluation={path}', '--design=6x1x4']) == 0
  (only,) = json.loads(capsys.readouterr().out)['budgets']
  verdict = built['searched_vs_random']['auto']['test']['verdict']
  assert only['spread_source'] == 'random_values'
  assert only['seed_std_points'] is None
  assert only['spread_points'] == pytest.approx(verdict['random_values_std'])
  upper = only['spread_upper_points']
  assert upper == pytest.approx(verdict['random_values_std_upper'])
  assert only['decisive']['design'] == power.needs(
      1.0, n_random=[4], seed_std=0.0, architecture_std=upper)
  (design,) = only['designs']
  assert design['at_spread_upper']['detectable_points'] == pytest.approx(
      power.detectable_difference(n_searched=6, n_random=4, seeds=1,
                                  seed_std=0.0, architecture_std=upper))
  assert 'seed noise included' in only['note']


def test_bad_input_is_one_line(sizing, tmp_path, capsys):
  assert sizing.main([f'--evaluation={tmp_path}/none']) == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert 'no readable evaluation.json' in line
  for bad in ('0', '12,x'):
    with pytest.raises(SystemExit):
      sizing.main([f'--evaluation={tmp_path}', f'--num_random={bad}'])


def test_a_planned_design_gets_its_power_at_both_spreads(sizing, tmp_path,
                                                         capsys):
  long, _ = pilot(tmp_path, 'long-budget', 0.03, 6000)
  assert sizing.main([f'--evaluation={long}', '--design=10x1x20',
                      '--design=3X2X12', '--decisive_difference=2']) == 0
  (budget,) = json.loads(capsys.readouterr().out)['budgets']
  big, small = budget['designs']
  assert (big['searches'], big['seeds'], big['num_random'],
          big['trainings']) == (10, 1, 20, 30)
  assert (small['searches'], small['seeds'], small['num_random'],
          small['trainings']) == (3, 2, 12, 30)
  for name, spread in (('at_spread', budget['spread_points']),
                       ('at_spread_upper', budget['spread_upper_points'])):
    kwargs = dict(n_searched=10, n_random=20, seeds=1,
                  seed_std=budget['seed_std_points'], architecture_std=spread)
    assert big[name]['spread_points'] == spread
    assert big[name]['power'] == power.power(2.0, **kwargs)
    assert big[name]['detectable_points'] == pytest.approx(
        power.detectable_difference(**kwargs))
  # A larger spread of the architectures can only cost power.
  assert big['at_spread_upper']['power'] <= big['at_spread']['power']


@pytest.mark.parametrize('bad', ['10x1', '10x0x20', 'tenx1x20', '10x1x20x2'])
def test_a_bad_design_is_one_line(sizing, tmp_path, capsys, bad):
  long, _ = pilot(tmp_path, 'long-budget', 0.03, 6000)
  assert sizing.main([f'--evaluation={long}', f'--design={bad}']) == 2
  captured = capsys.readouterr()
  (line,) = captured.err.splitlines()
  assert f'--design={bad}' in line and 'SEARCHESxSEEDSxRANDOM' in line
  assert captured.out == ''
