"""Runs bin/analyze_search.py on a synthetic search dir, as a subprocess
(and once in the test's process)."""

import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from bin import analyze_search
from bin import describe_arch
from tests.bin import one_process
from tests.results import test_analysis as fake
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TOOL = os.path.join(ROOT, 'bin', 'analyze_search.py')
# Only stops a hung tool; not a speed requirement, so generous enough for a
# slow, loaded machine (each run imports TensorFlow).
HANG_GUARD_S = 600


def run_tool(*args, **env_updates):
  # As a user runs it: TensorFlow's log level left to the tool.
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  env.update(env_updates)
  return subprocess.run([sys.executable, TOOL, *args], capture_output=True,
                        text=True, env=env, cwd=ROOT,
                        timeout=HANG_GUARD_S)


@pytest.fixture(scope='module')
def search_dir(tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp('search'))
  spec = search_spaces.get(fake.SPACE).spec()
  decisions = schema.decisions(spec)
  logged = {s: fake.random_logits(decisions, s) for s in fake.LOGGED_STEPS}
  fake.write_search_files(model_dir, spec)
  fake.write_checkpoint(model_dir, decisions, logged[30], 30)
  fake.write_events(model_dir, decisions, logged)
  write_graph_events(model_dir)
  return model_dir, spec, logged


def write_graph_events(model_dir, runs=2):
  """A graph per (re)start, as TPUEstimator writes them into the model dir.

  TensorBoard's reader warns about each graph after the first ("Found more
  than one graph event per run"); the tool must not pass that on.
  """
  for run in range(runs):
    graph = tf.Graph()
    with graph.as_default():  # FileWriter needs graph mode.
      tf.constant(1.0)
      tf.compat.v1.summary.FileWriter(
          model_dir, graph=graph, filename_suffix=f'.run{run}').close()


@pytest.fixture(scope='module')
def json_and_plot(search_dir, tmp_path_factory):
  """(the tool's run with --format=json --plot, the plot's path): one run
  that two tests read."""
  model_dir, _, _ = search_dir
  out = tmp_path_factory.mktemp('json')
  plot = str(out / 'history.png')
  # An empty matplotlib config dir: matplotlib rebuilds its font cache, as
  # on first use of a new install (e.g. a fresh clone's venv), and logs it.
  done = run_tool(f'--model_dir={model_dir}', '--format=json',
                  f'--plot={plot}', MPLCONFIGDIR=str(out / 'mpl'))
  return done, plot


def test_json_and_plot(search_dir, json_and_plot):
  _, spec, logged = search_dir
  done, plot = json_and_plot
  assert done.returncode == 0, done.stderr
  # Progress only: no TensorFlow start-up lines, no event-reader warnings,
  # no matplotlib log lines (its "building the font cache" warning, logged
  # when the rebuild takes over 5 s, is hidden too).
  (line,) = done.stderr.splitlines()
  assert line.endswith(f'] Wrote {plot}')
  data = json.loads(done.stdout)
  expected = fake.expected_indices(spec, logged[30])
  assert data['architecture'] == architecture.format_indices(expected)
  assert data['indices'] == list(expected)
  assert data['step'] == 30 and data['source'] == 'checkpoint'
  context = cost_models.CostContext(fake.SPACE, image_size=32, num_classes=10,
                                    input_channels=1)
  assert data['cost/pixel1_latency'] == cost_models.get(
      'pixel1_latency').cost(spec, expected, context)
  v = logged[30][0]
  # float32 logits: the tool's softmax and this one round differently by a
  # few float32 ulps (tests/results/test_analysis.py).
  np.testing.assert_allclose(data['decisions'][0]['probabilities'],
                             np.exp(v) / np.exp(v).sum(), rtol=1e-6)
  assert os.path.getsize(plot) > 10000


def test_csv_at_an_earlier_step(search_dir, capsys):
  # In this process: the tool's flags parsed and its main run, as cli.run
  # does (a whole process in test_json_and_plot).
  model_dir, spec, logged = search_dir
  capsys.readouterr()
  one_process.run_main(analyze_search, f'--model_dir={model_dir}',
                       '--format=csv', '--step=29')
  (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
  assert row['step'] == '20' and row['source'] == 'events'
  assert row['architecture'] == architecture.format_indices(
      fake.expected_indices(spec, logged[20]))


def test_missing_dir_is_a_one_line_error():
  # Each run pays a TensorFlow import: the other error cases are tested on
  # the library (tests/results/test_analysis.py).
  done = run_tool('--model_dir=/nonexistent/run')
  assert done.returncode == 2
  assert done.stdout == ''
  assert done.stderr.strip().splitlines() == [
      'analyze_search.py: error: model dir /nonexistent/run does not exist']


def test_json_keys_agree_with_describe_arch(json_and_plot):
  done, _ = json_and_plot
  assert done.returncode == 0, done.stderr
  data = json.loads(done.stdout)
  described = describe_arch.describe(fake.SPACE, data['architecture'],
                                     num_classes=10, image_size=32,
                                     input_channels=1)
  # `architecture`: the string; `indices`: its list of ints, in both.
  for key in ('search_space', 'architecture', 'indices', 'block_string'):
    assert data[key] == described[key], key
  assert isinstance(data['architecture'], str)
  assert all(isinstance(i, int) for i in data['indices'])
