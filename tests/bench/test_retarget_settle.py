"""Tests of bench/retarget_settle.py's arithmetic (its run is measured by
running it, never in a test)."""

import types

import pytest

from tests import files


@pytest.fixture(scope='module')
def bench():
  return files.load_script('bench', 'retarget_settle.py')


def test_argmax_changes_are_counted_per_quarter(bench):
  history = [(0, 'a'), (20, 'b'), (40, 'b'), (60, 'c'), (80, 'c'),
             (100, 'd'), (120, 'd'), (140, 'd'), (160, 'e')]
  # 8 intervals, 2 per quarter: changes at 0->20, 40->60, 80->100, 140->160.
  assert bench._changes_by_quarter(history) == [1, 1, 1, 1]
  assert bench._changes_by_quarter([(0, 'a')]) == [0, 0, 0, 0]


def test_window_step_is_where_the_cost_last_entered_the_window(
    bench, monkeypatch):
  # A fake cost model: the architecture string is its cost.
  model = types.SimpleNamespace(cost=lambda spec, arch, context: float(arch))
  monkeypatch.setattr(bench, 'cost_models', types.SimpleNamespace(
      get=lambda name: model, context_for=lambda config: None))
  config = types.SimpleNamespace(cost_model='fake')
  history = [(0, '50'), (20, '60'), (40, '70'), (60, '60'), (80, '60.5')]
  assert bench._window_step(history, None, config, 60.0) == 60
  # Out of the window (+-1.2%) at the last logged step: unsettled.
  assert bench._window_step(history[:3], None, config, 60.0) is None
  assert bench._window_step([], None, config, 60.0) is None


def test_the_flags_override_only_what_they_set(bench, tmp_path):
  # pylint: disable=g-import-not-at-top
  from tunas_search.config import SearchConfig
  from tunas_search.search import retarget
  source = types.SimpleNamespace(
      model_dir=str(tmp_path / 'search'),
      config=SearchConfig(search_space='proxylessnas_search',
                          model_dir=str(tmp_path / 'search'), num_classes=10,
                          num_train_examples=1000,
                          rl_cost_model_target=84.0))
  target = str(tmp_path / 'retarget')
  assert bench.overrides(None, None) == {}
  default = retarget.make_config(source, target, [60.0],
                                 **bench.overrides(None, None))
  assert default.rl_batch_size_multiplier == (
      retarget.RETARGET_DEFAULTS['rl_batch_size_multiplier'])
  assert default.max_steps == source.config.max_steps
  chosen = retarget.make_config(source, target, [60.0],
                                **bench.overrides(300, 4.0))
  assert (chosen.max_steps, chosen.rl_batch_size_multiplier) == (300, 4.0)
