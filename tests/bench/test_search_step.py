"""Tests of bench/search_step.py's sides and ratios.

The benchmark's timings are measured by running it (`make bench`), never in
a test; these tests check only which sides a run builds and the arithmetic
of the ratios it prints.
"""

import sys

import pytest

from tests import files


@pytest.fixture(scope='module')
def search_step():
  return files.load_script('bench', 'search_step.py')


def test_all_names_every_side_in_order(search_step):
  assert search_step.parse_sides('all') == list(search_step.SIDES)


def test_sides_come_in_table_order_whatever_the_order_given(search_step):
  assert search_step.parse_sides('parts, search') == ['search', 'parts']


@pytest.mark.parametrize('text, match', [
    ('search,widths', r"unknown --sides \['widths'\]; valid: all or .*parts"),
    ('', "unknown --sides ''"),
    ('new_archs,parts', "new_archs times the 'search' side's graph"),
    ('supernet_update', "supernet_update times the 'search' side's graph"),
])
def test_bad_sides_are_refused_naming_the_choices(search_step, text, match):
  with pytest.raises(ValueError, match=match):
    search_step.parse_sides(text)


def test_every_timed_key_belongs_to_one_side(search_step):
  keys = [k for side in search_step.SIDES.values() for k in side]
  assert len(keys) == len(set(keys))
  for numerator, denominator, _ in search_step.RATIOS.values():
    assert set(numerator + denominator) <= set(keys)


def test_ratios_divide_the_sums_of_their_parts(search_step):
  ms = {'search': 30.0, 'train': 20.0, 'inference': 5.0,
        'search_every_step': 40.0, 'overhead': 0.3}
  assert search_step.ratios(ms) == {
      'search_vs_sampled_parts_ratio': 1.2,
      'every_step_vs_sampled_parts_ratio': 1.6,
      'deferred_vs_every_step_ratio': 0.75,
      'overhead_share': 0.01,
  }


def test_a_ratio_missing_a_part_is_left_out(search_step):
  # search,parts (an A/B run): the masked and new-architecture ratios have
  # no parts, and no ratio divides by a missing side's zero.
  ratios = search_step.ratios({'search': 12.0, 'train': 8.0,
                               'inference': 2.0})
  assert ratios == {'search_vs_sampled_parts_ratio': 1.2}


def _refusal(search_step, monkeypatch, capsys, flags):
  """main() in this process (the fixture's TensorFlow import serves every
  case): its exit code and the last line of its stderr.

  The refusals come from argparse before anything is built, so a process
  per case would only pay a TensorFlow start-up each.
  """
  monkeypatch.setattr(sys, 'argv', ['search_step.py', *flags])
  with pytest.raises(SystemExit) as exit_:
    search_step.main()
  return exit_.value.code, capsys.readouterr().err.strip().splitlines()[-1]


def test_an_unusable_trace_dir_is_refused_before_building(
    search_step, monkeypatch, capsys, tmp_path):
  # A file where the folder should go: refused in one line, exit 2, before
  # minutes of building and timing.
  (tmp_path / 'file').write_text('')
  code, last = _refusal(search_step, monkeypatch, capsys,
                        [f'--trace_dir={tmp_path / "file" / "traces"}'])
  assert code == 2
  assert last.startswith(
      f"search_step.py: error: --trace_dir '{tmp_path / 'file' / 'traces'}': ")


@pytest.mark.parametrize('flags, message', [
    (['--controller_placement=gpu'], "unknown controller_placement 'gpu'; "
     'valid choices: auto, host, default'),
])
def test_bad_placement_flags_are_refused_in_one_line(
    search_step, monkeypatch, capsys, flags, message):
  code, last = _refusal(search_step, monkeypatch, capsys, flags)
  assert code == 2
  assert last == f'search_step.py: error: {message}'
