"""bin/search.py --coarse_model_dir: the fine stage of MobileNetV4's search.

The coarse search's model dir is read through tunas_search.results.analysis, which
is stubbed here with a coarse search's config, spec and controller, except
in the test on a synthetic model dir with the file the coarse search writes
(tests/e2e/test_two_stage.py runs the real stages).
"""

import json
import os
import types

import numpy as np
import pytest
from absl import flags

from bin import cli
from bin import search
from bin import stages
from search_spaces import mobilenet_v4
from tests.results.test_analysis import write_checkpoint
from tunas_search.results import analysis
from tunas_search.search import runner
from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space import serialization
from tunas_search.config import SearchConfig

COARSE = 'mobilenet_v4_conv_small_coarse'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
PRESET = 'mobilenet_v4_small_cpu.cfg'
# The fine spaces of the coarse controller below at the preset's target
# (6e6 MAdds at 32x32, 10 classes, 1 channel): its final architecture
# (auto -> in_window), whose fine space spans 5.52e6-6.32e6 MAdds, and its
# argmax (5.66e6 MAdds, outside the window), whose fine space tops out at
# 5.92e6: the target is out of its reach.
FINAL_SPACE = 'mobilenet_v4_conv_small_fine_144x4_128x5'
ARGMAX_SPACE = 'mobilenet_v4_conv_small_fine_144x4_64x8'


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


def _probabilities(indices, lean=0.6):
  """A controller that leans (`lean`) to `indices`, the rest spread evenly:
  its argmax is `indices`, and its samples vary enough to reach a window."""
  spec = mobilenet_v4.mobilenet_v4_conv_small_coarse()
  rows = []
  for d, c in zip(schema.decisions(spec), indices):
    row = np.full(d.num_choices, (1 - lean) / (d.num_choices - 1))
    row[c] = lean
    rows.append(row)
  return rows


class FakeAnalysis:
  step = 200
  indices = _coarse_indices()
  architecture = architecture.format_indices(indices)
  decisions = [types.SimpleNamespace(probabilities=p)
               for p in _probabilities(indices)]


def _coarse_config(model_dir):
  return SearchConfig(
      search_space=COARSE, model_dir=str(model_dir),
      num_classes=10, num_train_examples=1000, dataset='embedded',
      image_size=32, input_channels=1, train_batch_size=32, max_steps=200,
      cost_model='madds', rl_cost_model_target=6e6,
      rl_cost_model_exponent=-0.07,
      cost_model_space='mobilenet_v4_conv_small_search')


@pytest.fixture
def coarse(monkeypatch, tmp_path):
  """A finished coarse search of 200 steps (stubbed)."""
  config = _coarse_config(tmp_path / 'coarse')
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
  # The coarse search's final architecture, not its argmax.
  assert config.search_space == FINAL_SPACE
  # What the coarse search optimised for, unless given.
  assert (config.dataset, config.image_size, config.cost_model,
          config.rl_cost_model_target, config.rl_cost_model_exponent,
          config.cost_model_space) == (
              'embedded', 32, 'madds', 6e6, -0.07,
              'mobilenet_v4_conv_small_search')
  assert config.max_steps == 50  # The schedule is the command line's.
  given = _config(tmp_path, '--coarse_model_dir=/coarse',
                  '--rl_cost_model_target=5.5e6', '--image_size=28',
                  f'--search_space={FINAL_SPACE}')
  assert (given.rl_cost_model_target, given.image_size) == (5.5e6, 28)


@pytest.mark.parametrize('argv, step, message', [
    (['--search_space=mobilenet_v4_conv_small_fine'], 200,
     '--search_space=mobilenet_v4_conv_small_fine does not match '
     f'--coarse_model_dir, whose fine space is {FINAL_SPACE}; give only one '
     'of them'),
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
  assert second.search_space == FINAL_SPACE
  assert second.max_steps == 200


def test_the_fine_stage_follows_the_final_architecture_the_coarse_search_wrote(
    tmp_path):
  # A synthetic coarse model dir: its config, spec and a last checkpoint
  # of the controller above, and the search_result.json the search writes
  # at its end (runner); no stub.
  coarse_dir = tmp_path / 'coarse'
  config = _coarse_config(coarse_dir)
  spec = mobilenet_v4.mobilenet_v4_conv_small_coarse()
  os.makedirs(coarse_dir)
  with open(coarse_dir / 'config.json', 'w', encoding='utf-8') as f:
    f.write(config.to_json())
  with open(coarse_dir / 'model_spec.json', 'w', encoding='utf-8') as f:
    f.write(serialization.dumps(spec, indent=1))
  write_checkpoint(str(coarse_dir), schema.decisions(spec),
                   [np.log(p) for p in _probabilities(_coarse_indices())],
                   step=200)
  result = runner._write_result(config, spec)  # pylint: disable=protected-access
  with open(coarse_dir / runner.RESULT_FILENAME, encoding='utf-8') as f:
    reported = json.load(f)['final_architecture']
  assert reported['label'] == 'auto -> in_window'
  assert reported['architecture'] != result.architecture  # Not the argmax.
  fine = _config(tmp_path, f'--coarse_model_dir={coarse_dir}')
  _, stages_of = mobilenet_v4.coarse_result(
      spec, architecture.parse_indices(reported['architecture']))
  assert fine.search_space == mobilenet_v4.fine_name(
      mobilenet_v4.CONV_SMALL, stages_of) == FINAL_SPACE
  coarse = stages.read(str(coarse_dir))
  assert (coarse.architecture, coarse.label, coarse.cost) == (
      reported['architecture'], 'auto -> in_window', reported['cost'])
  assert coarse.describe() == (
      f'Fine stage of the coarse search in {coarse_dir}: its architecture '
      f'(auto -> in_window) {reported["architecture"]}, cost '
      f'{reported["cost"]:.4g} madds; fine space {FINAL_SPACE}')


@pytest.mark.usefixtures('coarse')
def test_another_coarse_architecture_may_be_asked_for(tmp_path):
  argmax = _config(tmp_path, '--coarse_model_dir=/coarse',
                   '--coarse_architecture=argmax',
                   '--rl_cost_model_target=5.5e6')
  assert argmax.search_space == ARGMAX_SPACE
  coarse = stages.read('/coarse', 'argmax')
  assert (coarse.architecture, coarse.label) == (FakeAnalysis.architecture,
                                                 'argmax')
  # An architecture string: its widths and depths (both stages' widest,
  # every block).
  spec = mobilenet_v4.mobilenet_v4_conv_small_coarse()
  widest = [d.num_choices - 1 if d.tag == schema.FILTERS else 0
            for d in schema.decisions(spec)]
  text = architecture.format_indices(widest)
  given = _config(tmp_path, '--coarse_model_dir=/coarse',
                  f'--coarse_architecture={text}',
                  '--allow_unreachable_target')
  assert given.search_space == 'mobilenet_v4_conv_small_fine_192x8_256x8'
  assert stages.read('/coarse', text).label == 'given'


@pytest.mark.usefixtures('coarse')
@pytest.mark.parametrize('argv, message', [
    (['--coarse_architecture=best'],
     '--coarse_architecture=best: architecture string entry 0 is '
     "'best'; expected a non-negative integer (format a:b:c, e.g. 0:2:1); "
     'valid: auto, argmax, in_window or an architecture string of '
     f'{COARSE}'),
    (['--coarse_architecture=1:2'],
     '--coarse_architecture=1:2: architecture has 2 indices but the search '
     'space has 16 decisions; valid: auto, argmax, in_window or an '
     f'architecture string of {COARSE}'),
])
def test_a_bad_coarse_architecture_is_one_error(tmp_path, argv, message):
  with pytest.raises(cli.UsageError) as raised:
    _config(tmp_path, '--coarse_model_dir=/coarse', *argv)
  assert str(raised.value) == message


@pytest.mark.parametrize('flag', ['--coarse_architecture=argmax',
                                  '--allow_unreachable_target'])
def test_the_fine_stage_flags_need_a_coarse_model_dir(tmp_path, flag):
  with pytest.raises(cli.UsageError) as raised:
    _config(tmp_path, flag)
  assert str(raised.value) == (
      f'--{flag[2:].split("=")[0]} needs --coarse_model_dir (the fine stage '
      "of MobileNetV4's two-stage search)")


@pytest.mark.usefixtures('coarse')
def test_an_unreachable_target_is_refused_before_anything_is_written(
    tmp_path):
  # The argmax's fine space tops out below the inherited 6e6 target.
  with pytest.raises(cli.UsageError) as raised:
    _config(tmp_path, '--coarse_model_dir=/coarse',
            '--coarse_architecture=argmax')
  assert str(raised.value) == (
      f'--rl_cost_model_target=6e+06 is out of reach of {ARGMAX_SPACE}: '
      'under --cost_model=madds its architectures cost 5.129e+06 to '
      '5.923e+06 madds; give a target in that range, another '
      '--coarse_architecture, or --allow_unreachable_target to search '
      'anyway')
  assert not os.path.exists(tmp_path / 'fine')
  # Asked for, the search goes ahead.
  config = _config(tmp_path, '--coarse_model_dir=/coarse',
                   '--coarse_architecture=argmax',
                   '--allow_unreachable_target')
  assert config.search_space == ARGMAX_SPACE
  span = stages.check_target(config, search.search_spaces.get(
      ARGMAX_SPACE).spec(), allow_unreachable=True)
  assert stages.describe_range(config, span) == (
      f'{ARGMAX_SPACE} costs 5.129e+06 to 5.923e+06 madds (exact); the '
      'target 6e+06 madds lies OUTSIDE it: no architecture reaches it')
