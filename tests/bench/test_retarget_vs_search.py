"""Tests of bench/retarget_vs_search.py on hand-made evaluations.

Each evaluation holds the fields of evaluate_search's evaluation.json that
the comparison reads: one retarget dir (with retarget.json), one full
search dir and random candidates with one training each.
"""

import json
import math

import numpy as np
import pytest

from tests import files
from tunas_search.evaluation import report
from tunas_search.evaluation import stats


@pytest.fixture(scope='module')
def bench():
  return files.load_script('bench', 'retarget_vs_search.py')


def evaluation(tmp_path, target, retarget_test, search_test, random_test,
               retarget_marked=True, search_marked=False):
  """An evaluation dir at `target`; validation = test + 1 point."""
  root = tmp_path / f't{target}'
  dirs = []
  for name, marked in (('retarget', retarget_marked),
                       ('search', search_marked)):
    d = root / name
    d.mkdir(parents=True)
    if marked:
      (d / 'retarget.json').write_text('{}')
    dirs.append(str(d))

  def candidate(cid, kind, test):
    return {'id': cid, 'kind': kind, 'cost': target,
            'compared': {'test': test, 'validation': test + 0.01},
            'one_shot': [0.5, 0.6]}
  candidates = [candidate('searched-0-auto', 'searched', retarget_test),
                candidate('searched-1-auto', 'searched', search_test)]
  candidates += [candidate(f'random-{i:02d}', 'random', v)
                 for i, v in enumerate(random_test)]
  built = {'target': target, 'window': [target - 1, target + 1],
           'candidates': candidates,
           'searches': [{'candidate': f'searched-{i}-auto', 'model_dir': d,
                         'in_window': True} for i, d in enumerate(dirs)]}
  out = root / 'eval'
  out.mkdir()
  (out / report.JSON_FILENAME).write_text(json.dumps(built))
  return str(out)


RANDOM = [0.80, 0.81, 0.79, 0.805, 0.795, 0.80]


def test_the_retarget_file_is_the_one_retargets_write(bench):
  # pylint: disable=g-import-not-at-top
  from tunas_search.search import retarget
  assert bench.RETARGET_FILENAME == retarget.RETARGET_FILENAME


def test_differences_are_retarget_minus_search_per_target(bench, tmp_path):
  path = evaluation(tmp_path, 60.0, 0.82, 0.83, RANDOM)
  row = bench.target_row(path, bench._read(path))
  assert row['difference_points']['test'] == pytest.approx(-1.0)
  assert row['retarget']['test_rank'] == 1
  assert row['retarget']['one_shot'] == pytest.approx(0.55)
  assert row['random']['test']['n'] == len(RANDOM)


def test_the_yardstick_pools_the_random_spread_within_targets(bench,
                                                              tmp_path):
  shifted = [v + 0.05 for v in RANDOM]  # another target's level, same scatter
  rows = [bench.target_row(p, bench._read(p)) for p in (
      evaluation(tmp_path, 60.0, 0.82, 0.83, RANDOM),
      evaluation(tmp_path, 100.0, 0.87, 0.86, shifted))]
  result = bench.compare(rows)['over_targets']['test']
  # Pooled within targets: the level shift between targets does not count.
  expected = 100 * np.std(RANDOM, ddof=1)
  assert result['spread_points'] == pytest.approx(expected)
  assert result['spread_dof'] == 2 * (len(RANDOM) - 1)
  assert result['spread_upper_points'] > expected
  assert result['mean_difference_points'] == pytest.approx(0.0)
  t = stats.t_quantile(0.975, result['spread_dof'])
  assert result['interval_points'][1] == pytest.approx(t * expected)
  assert result['verdict'] == 'undecided'
  # More targets, smaller detectable difference (sqrt(2 / k)).
  one = bench.compare([bench.target_row(p, bench._read(p)) for p in (
      evaluation(tmp_path / 'one', 60.0, 0.82, 0.83, RANDOM),)])
  assert (one['over_targets']['test']['detectable_points']
          > result['detectable_points'] * math.sqrt(2) * 0.99)


def test_a_clearly_worse_retarget_is_called_worse(bench, tmp_path):
  rows = [bench.target_row(p, bench._read(p)) for p in (
      evaluation(tmp_path, 60.0, 0.75, 0.83, RANDOM),
      evaluation(tmp_path, 80.0, 0.76, 0.84, RANDOM),
      evaluation(tmp_path, 100.0, 0.74, 0.83, RANDOM))]
  result = bench.compare(rows)['over_targets']
  assert result['test']['verdict'] == 'retarget_worse'
  assert result['test']['interval_points'][1] < 0


def test_another_design_gets_one_line(bench, tmp_path, capsys):
  both = evaluation(tmp_path / 'a', 60.0, 0.82, 0.83, RANDOM,
                    search_marked=True)
  assert bench.main([f'--evaluation={both}']) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1
  assert 'expected exactly one (the retarget)' in err
  assert bench.main([f'--evaluation={tmp_path}/missing']) == 2
  assert 'no evaluation.json' in capsys.readouterr().err
  few = evaluation(tmp_path / 'b', 60.0, 0.82, 0.83, [0.8])
  assert bench.main([f'--evaluation={few}']) == 2
  assert 'fewer than 2' in capsys.readouterr().err
