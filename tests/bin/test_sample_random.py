"""Runs bin/sample_random.py as a subprocess."""

import json
import os
import subprocess
import sys

import pytest

import search_spaces
from tunas_search.space import architecture
from tunas_search import cost_models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TOOL = os.path.join(ROOT, 'bin', 'sample_random.py')
# Only stops a hung tool; not a speed requirement, so generous enough for a
# slow, loaded machine.
HANG_GUARD_S = 600


def run_tool(*args):
  return subprocess.run([sys.executable, TOOL, *args], capture_output=True,
                        text=True, cwd=ROOT, timeout=HANG_GUARD_S)


def test_json_samples_in_window_and_reproducible():
  args = ['--search_space=proxylessnas_search', '--min_cost=83',
          '--max_cost=85', '--num_samples=2', '--seed=11', '--format=json']
  first, second = run_tool(*args), run_tool(*args)
  assert first.returncode == 0, first.stderr
  assert first.stdout == second.stdout
  samples = json.loads(first.stdout)
  assert len(samples) == 2
  spec = search_spaces.get('proxylessnas_search').spec()
  context = cost_models.CostContext('proxylessnas_search')
  for s in samples:
    assert 83.0 <= s['cost'] <= 85.0
    indices = architecture.parse_indices(s['architecture'], spec)
    assert s['cost'] == cost_models.get('pixel1_latency').cost(
        spec, indices, context)


def test_text_madds_window():
  done = run_tool('--cost_model=madds', '--max_cost=300e6', '--seed=1',
                  '--num_samples=3')
  assert done.returncode == 0, done.stderr
  lines = done.stdout.splitlines()
  assert len(lines) == 3
  spec = search_spaces.get('proxylessnas_search').spec()
  context = cost_models.CostContext('proxylessnas_search')
  for line in lines:
    indices = architecture.parse_indices(line, spec)
    assert cost_models.get('madds').cost(spec, indices, context) <= 300e6


@pytest.mark.parametrize('args,message', [
    (['--min_cost=400', '--max_cost=500'],
     'no architecture of proxylessnas_search costs [400, 500] ms'),
    (['--min_cost=85', '--max_cost=83'], 'min_cost 85 is above max_cost 83'),
    (['--search_space=mobilenet_v2'], 'is a reference architecture'),
    (['--cost_model=flops'], "unknown cost model 'flops'"),
    (['--min_cost=210', '--max_attempts=5'], 'found 0 of 1'),
    # The rules of a search's config (tunas_search.config), not numpy's
    # traceback or a silently ignored flag.
    (['--seed=-1'], 'seed must be >= 0, got -1'),
    (['--image_size=5'], 'image_size 5 is outside the valid range 28..512'),
    (['--image_size=513'],
     'image_size 513 is outside the valid range 28..512'),
    (['--cost_model=madds', '--cost_model_file=model.json'],
     "cost_model_file is only read by cost_model=measured, not 'madds'"),
    # A window needs a cost: `none` is refused, and so never listed.
    (['--cost_model=none'], "unknown cost model 'none'; valid choices: "
     'madds, measured, params, pixel1_latency'),
])
def test_errors_are_one_line(args, message):
  done = run_tool(*args)
  assert done.returncode == 2
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1, done.stderr
  assert lines[0].startswith('sample_random.py: error: ')
  assert message in lines[0]


@pytest.mark.parametrize('args,noun,names', [
    (['--cost_model=nope'], "cost model 'nope'", cost_models.names()),
    # Reference nets are refused: not listed either.
    (['--search_space=nope'], "search space 'nope'",
     search_spaces.search_space_names() + [
         'or MODULE:FUNCTION for a space in your own code']),
])
def test_unknown_names_list_only_what_the_tool_takes(args, noun, names):
  done = run_tool(*args)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines() == [
      f'sample_random.py: error: unknown {noun}; valid choices: '
      f'{", ".join(names)}']
