"""Tests for tunas_search.evaluation.noise on hand-made candidate entries."""

import pytest

from tunas_search.evaluation import noise
from tunas_search.evaluation import stats


def entry(cid, kind, values, architecture=None):
  return {'id': cid, 'kind': kind, 'architecture': architecture or cid,
          'runs': [{'run': r, 'validation': v, 'test': v - 0.01}
                   for r, v in enumerate(values)]}


def entries(*items):
  return {e['id']: e for e in items}


def test_compared_runs_are_those_every_trained_candidate_finished():
  found = entries(entry('a', 'random', [0.8, 0.82]),
                  entry('b', 'random', [0.7]), entry('c', 'random', []))
  assert noise.compared_runs(found) == [0]
  assert noise.compared_runs(entries(entry('c', 'random', []))) == []
  # One architecture counts once.
  twice = entries(entry('a', 'searched', [0.8]),
                  entry('r', 'random', [0.8], architecture='a'))
  assert [e['id'] for e in noise.distinct(twice)] == ['a']


def test_the_table_with_the_most_residual_dof_is_decomposed():
  # Two candidates with 3 runs ((2-1)(3-1) = 2 dof) lose to four with 2
  # runs ((4-1)(2-1) = 3 dof).
  rows = [[0.80, 0.82, 0.81], [0.75, 0.78, 0.74], [0.70, 0.73],
          [0.77, 0.76]]
  found = entries(*(entry(f'r{i}', 'random', v) for i, v in enumerate(rows)))
  out = noise.noise(found, noise.compared_runs(found))
  d = stats.two_way([r[:2] for r in rows])
  assert out['seeds_compared'] == 2 and out['runs_compared'] == [0, 1]
  assert out['validation']['seed_std'] == pytest.approx(d.seed_std)
  assert out['validation']['table']['candidates'] == ['r0', 'r1', 'r2', 'r3']
  assert out['validation']['random_architecture_std_upper'] == (
      pytest.approx(d.architecture_std_upper))
  assert out['test']['seed_std'] == pytest.approx(d.seed_std)
  assert out == noise.noise_of(list(found.values()))


def test_nothing_to_decompose_before_two_runs():
  found = entries(entry('a', 'random', [0.8]), entry('b', 'random', [0.7]))
  out = noise.noise(found, [0])
  assert out['test']['seed_std'] is None and out['seeds_compared'] == 1
  # Two runs but one random candidate: no spread to measure.
  found = entries(entry('a', 'random', [0.8, 0.9]),
                  entry('s', 'searched', [0.7, 0.8]))
  assert noise.noise(found, [0, 1])['test']['seed_std'] is None
