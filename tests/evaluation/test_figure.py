"""Tests for tunas_search.evaluation.figure on the hand-made evaluation."""

import pytest

from tests.evaluation import test_report
from tunas_search.evaluation import figure
from tunas_search.evaluation import report


@pytest.fixture(scope='module')
def built():
  return report.build(
      test_report.make_plan(), test_report.ONE_SHOT,
      {k: test_report.runs(v) for k, v in test_report.VALIDATION.items()},
      seeds=2, seed=0, bootstrap_resamples=50)


def test_plot_draws_both_panels_and_the_verdict(built, tmp_path):
  path = str(tmp_path / 'evaluation.png')
  assert figure.plot(path, built)
  assert (tmp_path / 'evaluation.png').stat().st_size > 10000
  assert not (tmp_path / 'evaluation.png.tmp').exists()


def test_wrap_keeps_every_word_in_order():
  text = ' '.join(f'w{i}' for i in range(100))
  wrapped = figure._wrap(text, width=40)  # pylint: disable=protected-access
  assert wrapped.split() == text.split()
  assert max(len(l) for l in wrapped.splitlines()) <= 40
