"""Tests of bench/retarget_cost.py's settling measure.

The benchmark's timings are measured by running it, never in a test; these
tests check only its arithmetic.
"""

import pytest

from tests import files


@pytest.fixture(scope='module')
def bench():
  return files.load_script('bench', 'retarget_cost.py')


def test_settles_at_the_first_step_of_the_last_run(bench):
  history = [(0, [0, 1]), (5, [1, 1]), (10, [0, 1]), (15, [0, 1]),
             (20, [0, 1])]
  assert bench.settle_step(history) == 10


def test_a_change_at_the_last_step_is_unsettled(bench):
  assert bench.settle_step([(0, [0]), (5, [0]), (10, [1])]) is None
  assert bench.settle_step([]) is None


def test_never_changing_settles_at_the_start(bench):
  assert bench.settle_step([(0, [2]), (5, [2])]) == 0
