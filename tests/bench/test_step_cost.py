"""Tests of bench/step_cost.py's ratio estimate and flag checks.

The benchmark's timings are measured by running it (`make bench`), never in
a test; these tests check only its arithmetic and its refusals.
"""

import pytest

from tests import files


@pytest.fixture(scope='module')
def step_cost():
  return files.load_script('bench', 'step_cost.py')


def test_paired_ratio_divides_within_rounds(step_cost):
  # The machine ran 2x slower in rounds 1 and 2: each round's two values
  # share its speed, so every round's ratio is 1.05.
  ratio, rounds = step_cost.paired_ratio([1.05, 2.1, 2.1], [1.0, 2.0, 2.0])
  assert rounds == pytest.approx([1.05, 1.05, 1.05])
  assert ratio == pytest.approx(1.05)


def test_paired_ratio_is_the_median_of_the_rounds(step_cost):
  ratio, rounds = step_cost.paired_ratio([3.0, 1.1, 1.2, 1.0],
                                         [1.0, 1.0, 1.0, 1.0])
  assert rounds == pytest.approx([3.0, 1.1, 1.2, 1.0])
  # One disturbed round moves the median little (the mean would be 1.575).
  assert ratio == pytest.approx(1.15)


@pytest.mark.parametrize('numerator, denominator',
                         [([], []), ([1.0, 2.0], [1.0])])
def test_paired_ratio_needs_one_value_of_each_per_round(
    step_cost, numerator, denominator):
  with pytest.raises(ValueError, match='one value of each per round'):
    step_cost.paired_ratio(numerator, denominator)


@pytest.mark.parametrize('flag', ['--steps', '--rounds', '--tower_rounds',
                                  '--instances'])
def test_counts_below_one_are_refused(step_cost, flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    step_cost.main([flag, '0'])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert f'{flag} must be at least 1, got 0' in err


def test_op_type_growth_ranks_the_median_growth(step_cost):
  # Three traced steps of each tower; ms and ops per op type and step.
  fewer = [{'Conv2D': (3.0, 10), 'Switch': (0.01, 2)},
           {'Conv2D': (3.2, 10), 'Switch': (0.01, 2)},
           {'Conv2D': (9.0, 10), 'Switch': (0.02, 2)}]  # A disturbed step.
  more = [{'Conv2D': (3.3, 10), 'Switch': (0.3, 166),
           'VarHandleOp': (1.0, 962)},
          {'Conv2D': (3.4, 10), 'Switch': (0.4, 166),
           'VarHandleOp': (1.2, 962)},
          {'Conv2D': (3.2, 10), 'Switch': (0.3, 166)}]  # None ran: 0.
  rows = step_cost.op_type_growth(fewer, more, top=2)
  assert rows == [
      {'op': 'VarHandleOp', 'ms_1': 0.0, 'ms_7': 1.0, 'ops_1': 0,
       'ops_7': 962},
      {'op': 'Switch', 'ms_1': 0.01, 'ms_7': 0.3, 'ops_1': 2, 'ops_7': 166}]
  # Conv2D's medians, 3.2 and 3.3, grew least; the disturbed 9.0 is out.
  assert step_cost.op_type_growth(fewer, more, top=3)[2] == {
      'op': 'Conv2D', 'ms_1': 3.2, 'ms_7': 3.3, 'ops_1': 10, 'ops_7': 10}


def test_negative_traced_steps_are_refused(step_cost, capsys):
  with pytest.raises(SystemExit) as exit_info:
    step_cost.main(['--traced_steps', '-1'])
  assert exit_info.value.code == 2
  assert '--traced_steps must be at least 0, got -1' in capsys.readouterr().err
