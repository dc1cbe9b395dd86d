"""Tests of bench/soak.py's pure logic: the kill plan and the checks.

The soak itself runs for hours (`bench/soak.py`, docs/robustness.md); these
tests check only its arithmetic.
"""

import pytest

from tests import files


@pytest.fixture(scope='module')
def soak():
  return files.load_script('bench', 'soak.py')


def test_kill_plan_alternates_and_is_seeded(soak):
  plan = soak.plan_kills(5, seed=3, window_s=100.0)
  assert [p['kind'] for p in plan] == ['save', 'random'] * 2 + ['save']
  assert all(1 <= p['save'] <= 3 and 0 <= p['delay_s'] <= 1.0
             for p in plan[::2])
  assert all(0 <= p['delay_s'] <= 100 for p in plan[1::2])
  assert soak.plan_kills(5, seed=3, window_s=100.0) == plan
  assert soak.plan_kills(5, seed=4, window_s=100.0) != plan
  assert soak.plan_kills(0, seed=3, window_s=100.0) == []
  quick = soak.plan_kills(4, seed=3, window_s=100.0, save_delay_s=0.05)
  assert all(p['delay_s'] <= 0.05 for p in quick[::2])


def test_expected_log_steps_and_gaps(soak):
  # Host loops of 20, checkpoints every 100, the last step 130.
  expected = soak.expected_log_steps(130, (20, 100))
  assert expected == [20, 40, 60, 80, 100, 120, 130]
  assert soak.missing_steps([20, 40, 60, 80, 100, 120, 130, 140],
                            expected) == []
  assert soak.missing_steps([20, 40, 100, 130], expected) == [60, 80, 120]


def test_rss_growth_compares_thirds(soak):
  assert soak.rss_growth([100.0] * 5) is None
  assert soak.rss_growth([100, 100, 101, 99, 100, 100]) == 0.0
  # Medians 100 and 125: 25% growth.
  assert soak.rss_growth([100, 100, 110, 115, 125, 125]) == pytest.approx(
      0.25)


def test_checkpoint_bound(soak):
  # keep_checkpoint_max 5: up to 7 checkpoints of 50 MB on disk at once.
  assert soak.checkpoint_bound_ok([50, 200, 350], 50.0, keep=5)
  assert not soak.checkpoint_bound_ok([50, 200, 400], 50.0, keep=5)
  assert soak.checkpoint_bound_ok([], 50.0, keep=5)


def test_timeline_keeps_at_most_the_points_asked(soak):
  samples = [{'t': 10.0 + i, 'step': i, 'rss_mb': 900.0, 'all': 60.0,
              'checkpoints': 50.0} for i in range(10)]
  line = soak.timeline(samples, points=4)
  assert len(line) == 4
  assert line[0] == [0.0, 0, 900.0, 60.0, 50.0]
  assert line[1][0] == 3.0
  assert soak.timeline([]) == []
