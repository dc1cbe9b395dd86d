"""bin/search.py --coarse_model_dir: the fine stage of MobileNetV4's search.

The coarse search's model dir is read through tunas_search.results.analysis, which
is stubbed here with a coarse search's config, spec and final architecture
(tests/e2e/test_two_stage.py runs the real stages).
"""

import os

import pytest
from absl import flags

from bin import cli
from bin import search
from bin import stages
from search_spaces import mobilenet_v4
from tunas_search.results import analysis
from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.config import SearchConfig

COARSE = 'mobilenet_v4_conv_small_coarse'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
PRESET = 'mobilenet_v4_small_cpu.cfg'


def _coarse_indices():
  """Stage 1: width 144 and blocks 1, 3 and 4 of 8; stage 2: width 64 and
  every block."""
  spec = mobilenet_v4.mobilenet_v4_conv_small_coarse()
  indices = []
  for d in schema.decisions(spec):
    if d.tag == schema.FILTERS:
      indices.append(d.oneof.choices.index(144 if d.path.startswith(
          'blocks/5/') else 64))
    else:  # Choice 0 keeps a block, 1 skips it.
      block = int(d.path.split('/')[3])
      indices.append(int(d.path.startswith('blocks/5/') and block > 3))
  return indices


class FakeAnalysis:
  step = 200
  indices = _coarse_indices()
  architecture = architecture.format_indices(indices)


@pytest.fixture
def coarse(monkeypatch, tmp_path):
  """A finished coarse search of 200 steps (stubbed)."""
  config = SearchConfig(
      search_space=COARSE, model_dir=str(tmp_path / 'coarse'),
      num_classes=10, num_train_examples=1000, dataset='embedded',
      image_size=32, input_channels=1, train_batch_size=32, max_steps=200,
      cost_model='madds', rl_cost_model_target=6e6,
      rl_cost_model_exponent=-0.07,
      cost_model_space='mobilenet_v4_conv_small_search')
  spec = mobilenet_v4.mobilenet_v4_conv_small_coarse()
  found = FakeAnalysis()
  monkeypatch.setattr(analysis, 'load_search', lambda d: (config, spec))
  monkeypatch.setattr(analysis, 'analyze', lambda d: found)
  return found


def _config(tmp_path, *argv):
  flag_values = flags.FlagValues()
  search.define_flags(flag_values)
  flag_values(['search.py', f'--model_dir={tmp_path / "fine"}', *argv])
  return search.build_config(flag_values)


@pytest.mark.usefixtures('coarse')
def test_the_fine_stage_searches_the_coarse_result(tmp_path):
  config = _config(tmp_path, '--coarse_model_dir=/coarse', '--max_steps=50')
  # Stage 1: the fixed first block and blocks 1-3 of the optional seven.
  assert config.search_space == 'mobilenet_v4_conv_small_fine_144x4_64x8'
  # What the coarse search optimised for, unless given.
  assert (config.dataset, config.image_size, config.cost_model,
          config.rl_cost_model_target, config.rl_cost_model_exponent,
          config.cost_model_space) == (
              'embedded', 32, 'madds', 6e6, -0.07,
              'mobilenet_v4_conv_small_search')
  assert config.max_steps == 50  # The schedule is the command line's.
  given = _config(tmp_path, '--coarse_model_dir=/coarse',
                  '--rl_cost_model_target=5e6', '--image_size=28',
                  '--search_space=mobilenet_v4_conv_small_fine_144x4_64x8')
  assert (given.rl_cost_model_target, given.image_size) == (5e6, 28)


@pytest.mark.parametrize('argv, step, message', [
    (['--search_space=mobilenet_v4_conv_small_fine'], 200,
     '--search_space=mobilenet_v4_conv_small_fine does not match '
     '--coarse_model_dir, whose fine space is '
     'mobilenet_v4_conv_small_fine_144x4_64x8; give only one of them'),
    ([], 199, '--coarse_model_dir: the coarse search in /coarse is at step '
     '199 of 200; finish it first (rerun its command)'),
])
def test_a_fine_stage_that_does_not_fit_is_one_error(coarse, tmp_path, argv,
                                                       step, message):
  coarse.step = step
  with pytest.raises(cli.UsageError) as raised:
    _config(tmp_path, '--coarse_model_dir=/coarse', *argv)
  assert str(raised.value) == message


def test_a_search_of_another_space_is_refused(monkeypatch):
  config = SearchConfig(
      search_space='mobilenet_v4_conv_small_search', model_dir='/x',
      num_classes=10, num_train_examples=1000, max_steps=10,
      cost_model='madds', rl_cost_model_target=1.0)
  spec = mobilenet_v4.mobilenet_v4_conv_small_search()
  monkeypatch.setattr(analysis, 'load_search', lambda d: (config, spec))
  monkeypatch.setattr(analysis, 'analyze', lambda d: FakeAnalysis())
  with pytest.raises(cli.UsageError) as raised:
    stages.read('/x')
  assert str(raised.value) == (
      '--coarse_model_dir: /x holds a search of mobilenet_v4_conv_small_search'
      ', not of a MobileNetV4 coarse space (mobilenet_v4_conv_small_coarse)')


def test_a_dir_without_a_search_is_refused(tmp_path):
  with pytest.raises(cli.UsageError) as raised:
    stages.read(str(tmp_path))
  assert str(raised.value) == (
      f'--coarse_model_dir: {tmp_path} is not a search model dir: it has no '
      'config.json')


@pytest.mark.usefixtures('coarse')
def test_the_preset_runs_both_stages(tmp_path):
  preset = f'--flagfile={os.path.join(ROOT, "configs", PRESET)}'
  first = _config(tmp_path, preset, f'--search_space={COARSE}')
  assert (first.search_space, first.dataset, first.image_size,
          first.cost_model, first.rl_cost_model_target, first.max_steps) == (
              COARSE, 'embedded', 32, 'madds', 6e6, 200)
  second = _config(tmp_path, preset, '--coarse_model_dir=/coarse')
  assert second.search_space == 'mobilenet_v4_conv_small_fine_144x4_64x8'
  assert second.max_steps == 200
