"""Tests for tunas_search.results.analysis and report on a synthetic search model dir."""

import csv
import io
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tunas_search.results import analysis
from tunas_search.space import architecture
from tunas_search.controller import policy as controller
from tunas_search import cost_models
from tunas_search.results import render as report
from tunas_search.space import schema
from tunas_search.space import serialization
from tunas_search.config import SearchConfig

SPACE = 'proxylessnas_search'
CHECKPOINT_STEP = 30
LOGGED_STEPS = (10, 20, 30)


def random_logits(decisions, seed):
  rng = np.random.default_rng(seed)
  # A one-choice decision's logit stays 0 in a search (it has no variable).
  return [rng.normal(size=d.num_choices).astype(np.float32) * 2
          if d.num_choices > 1 else np.zeros(1, np.float32)
          for d in decisions]


def write_checkpoint(model_dir, decisions, values, step):
  """Saves controller logits and a global step like a search checkpoint."""
  graph = tf.Graph()
  with graph.as_default():
    variables = controller.create_logits(decisions)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    assigns = [variables[n].assign(x) for n, x in
               controller.grouped_values(decisions, values).items()]
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(assigns + [global_step.assign(step)])
      saver.save(sess, os.path.join(model_dir, 'model.ckpt'),
                 global_step=step)


def write_events(model_dir, decisions, logits_by_step):
  """Logs logits plus cost/reward scalars with TF2 summaries (as host_call)."""
  writer = tf.summary.create_file_writer(model_dir)
  with writer.as_default():
    for step, values in logits_by_step.items():
      for d, v in zip(decisions, values):
        for j in range(d.num_choices):
          tf.summary.scalar(f'rlpathlogits/{d.path}/{j}', v[j], step=step)
          tf.summary.scalar(f'rltaglogits/{d.tag_name}/{j}', v[j], step=step)
      tf.summary.scalar('rlcontroller/estimated_cost', 80.0 + step, step=step)
      tf.summary.scalar('rlcontroller/reward', 0.01 * step, step=step)
      tf.summary.scalar('model/loss', 1.0, step=step)
  writer.close()


def make_config(model_dir):
  return SearchConfig(
      search_space=SPACE, model_dir=str(model_dir), num_classes=10,
      num_train_examples=64, image_size=32, input_channels=1,
      train_batch_size=8, max_steps=CHECKPOINT_STEP,
      cost_model='pixel1_latency', cost_model_space=SPACE,
      rl_cost_model_target=84.0)


def write_search_files(model_dir, spec):
  os.makedirs(model_dir, exist_ok=True)
  with open(os.path.join(model_dir, 'config.json'), 'w') as f:
    f.write(make_config(model_dir).to_json())
  with open(os.path.join(model_dir, 'model_spec.json'), 'w') as f:
    f.write(serialization.dumps(spec, indent=1))


@pytest.fixture(scope='module')
def search_dir(tmp_path_factory):
  """A finished fake search: logits logged at 10/20/30, checkpoint at 30."""
  model_dir = str(tmp_path_factory.mktemp('search'))
  spec = search_spaces.get(SPACE).spec()
  decisions = schema.decisions(spec)
  logged = {s: random_logits(decisions, s) for s in LOGGED_STEPS}
  write_search_files(model_dir, spec)
  write_checkpoint(model_dir, decisions, logged[CHECKPOINT_STEP],
                   CHECKPOINT_STEP)
  write_events(model_dir, decisions, logged)
  return model_dir, spec, decisions, logged


def expected_indices(spec, values):
  return architecture.canonicalize(
      spec, [int(np.argmax(v)) for v in values])


@pytest.mark.float_paths
def test_latest_checkpoint_gives_argmax_and_softmax(search_dir):
  model_dir, spec, decisions, logged = search_dir
  result = analysis.analyze(model_dir)
  values = logged[CHECKPOINT_STEP]
  assert result.step == 30
  assert result.source == analysis.CHECKPOINT
  assert result.checkpoint.endswith('model.ckpt-30')
  assert result.indices == expected_indices(spec, values)
  assert result.architecture == architecture.format_indices(result.indices)
  assert len(result.decisions) == len(decisions) == 73
  for decision_report, d, v in zip(result.decisions, decisions, values):
    softmax = np.exp(v - v.max()) / np.exp(v - v.max()).sum()
    # The logits are float32 (checkpoint and events): the two softmaxes may
    # round differently in float32, a few ulps (6e-8 each): rtol=1e-6 here
    # and in the tests below.
    np.testing.assert_allclose(decision_report.probabilities, softmax,
                               rtol=1e-6)
    assert (decision_report.path, decision_report.tag_name) == (d.path,
                                                               d.tag_name)
  assert result.block_string == architecture.block_string(
      architecture.prune(spec, result.indices))


def test_costs_match_cost_models(search_dir):
  model_dir, spec, _, _ = search_dir
  result = analysis.analyze(model_dir)
  context = cost_models.CostContext(SPACE, image_size=32, num_classes=10,
                                    input_channels=1)
  indices = architecture.parse_indices(result.architecture, spec)
  assert sorted(result.costs) == ['madds', 'params', 'pixel1_latency']
  for name, value in result.costs.items():
    assert value == cost_models.get(name).cost(spec, indices, context)
  assert 20.0 < result.costs['pixel1_latency'] < 250.0


@pytest.mark.float_paths
def test_step_picks_the_last_logged_point(search_dir):
  model_dir, spec, _, logged = search_dir
  result = analysis.analyze(model_dir, step=25)
  assert (result.step, result.source, result.checkpoint) == (
      20, analysis.EVENTS, None)
  assert result.indices == expected_indices(spec, logged[20])
  assert result.indices != expected_indices(spec, logged[30])
  first = result.decisions[0]
  v = logged[20][0]
  np.testing.assert_allclose(first.probabilities,
                             np.exp(v) / np.exp(v).sum(), rtol=1e-6)
  # A checkpoint at exactly the asked step wins over the events.
  assert analysis.analyze(model_dir, step=30).source == analysis.CHECKPOINT


def test_step_before_anything_logged(search_dir):
  with pytest.raises(analysis.AnalysisError, match='first is at step 10'):
    analysis.analyze(search_dir[0], step=5)


def test_read_scalars_uses_tensorboard_reader(search_dir):
  scalars = analysis.read_scalars(search_dir[0])
  assert scalars['rlcontroller/estimated_cost'] == [(10, 90.0), (20, 100.0),
                                                    (30, 110.0)]
  assert 'model/loss' not in scalars  # Default prefix keeps rl* tags only.
  everything = analysis.read_scalars(search_dir[0], prefixes=('',))
  assert everything['model/loss'] == [(10, 1.0), (20, 1.0), (30, 1.0)]


def test_formats(search_dir):
  result = analysis.analyze(search_dir[0])
  data = json.loads(report.format_json(result))
  assert data['search_space'] == SPACE and data['step'] == 30
  assert data['architecture'] == result.architecture
  assert data['indices'] == result.indices
  assert data['cost/pixel1_latency'] == data['costs']['pixel1_latency']
  assert data['decisions'][5]['choice'] == result.indices[5]
  assert set(data['decisions'][5]) == {'index', 'path', 'tag_name',
                                       'probabilities', 'choice'}
  rows = list(csv.DictReader(io.StringIO(report.format_csv(result))))
  assert len(rows) == 1
  assert rows[0]['architecture'] == result.architecture
  assert float(rows[0]['cost/madds']) == result.costs['madds']
  text = report.format_text(result)
  assert result.architecture in text and result.block_string in text
  assert f'{result.costs["pixel1_latency"]:.2f} ms' in text
  assert f'{result.costs["params"]:,.0f} params' in text
  assert len(text.splitlines()) == 3 + 3 + 2 + 73


def test_summary_names_the_result_and_what_next(search_dir):
  result = analysis.analyze(search_dir[0])
  lines = report.format_summary(result, '/x/search_result.json').splitlines()
  assert lines[0] == f'Search at step 30 in {search_dir[0]}'
  assert lines[1] == f'  argmax:       {result.architecture}'
  assert lines[3] == (f'  costs:        madds={result.costs["madds"]:.4g}, '
                      f'params={result.costs["params"]:.4g}, '
                      f'pixel1_latency={result.costs["pixel1_latency"]:.4g}')
  assert lines[4] == '  details:      /x/search_result.json'
  assert lines[-1].endswith(f'--model_dir={search_dir[0]}')


def test_plot_without_matplotlib_fails_clearly(search_dir, monkeypatch,
                                               tmp_path):
  # The drawing itself is exercised by tests/bin/test_analyze_search.py.
  monkeypatch.setitem(sys.modules, 'matplotlib', None)  # Import fails.
  with pytest.raises(analysis.AnalysisError, match='needs matplotlib'):
    report.plot_history(str(tmp_path / 'x.png'), search_dir[1], {})
  assert not (tmp_path / 'x.png').exists()


@pytest.mark.float_paths
def test_probability_history(search_dir):
  model_dir, _, decisions, logged = search_dir
  scalars = analysis.read_scalars(model_dir)
  steps, probs = analysis.probability_history(scalars, decisions[3])
  assert steps == [10, 20, 30]
  v = logged[20][3]
  np.testing.assert_allclose(probs[1], np.exp(v) / np.exp(v).sum(), rtol=1e-6)


def test_running_search_without_checkpoint_uses_events(tmp_path):
  spec = search_spaces.get(SPACE).spec()
  decisions = schema.decisions(spec)
  values = random_logits(decisions, 7)
  write_search_files(str(tmp_path), spec)
  write_events(str(tmp_path), decisions, {40: values})
  result = analysis.analyze(str(tmp_path))
  assert (result.step, result.source) == (40, analysis.EVENTS)
  assert result.indices == expected_indices(spec, values)


def test_errors(tmp_path):
  with pytest.raises(analysis.AnalysisError, match='does not exist'):
    analysis.analyze(str(tmp_path / 'missing'))
  with pytest.raises(analysis.AnalysisError, match='no config.json'):
    analysis.analyze(str(tmp_path))
  write_search_files(str(tmp_path), search_spaces.get(SPACE).spec())
  with pytest.raises(analysis.AnalysisError, match='no checkpoint or logged'):
    analysis.analyze(str(tmp_path))


def test_checkpoint_of_another_space(tmp_path):
  write_search_files(str(tmp_path), search_spaces.get(SPACE).spec())
  other = schema.decisions(search_spaces.get('mobilenet_v3_like_search').spec())
  write_checkpoint(str(tmp_path), other, [np.zeros(d.num_choices, np.float32)
                                          for d in other], 5)
  # mobilenet_v3_like_search has 21 three-choice decisions, proxylessnas 22.
  with pytest.raises(analysis.AnalysisError,
                     match=r'does not match: checkpoint .*choices_3.* '
                     r'shape \[21, 3\]'):
    analysis.analyze(str(tmp_path))


def test_settle_step_is_the_start_of_the_last_unchanged_run():
  assert analysis.settle_step([(0, 'a'), (20, 'b'), (40, 'a'),
                               (60, 'a')]) == 40
  assert analysis.settle_step([(0, 'a'), (20, 'a')]) == 0
  # Still changing at the last logged step, or nothing logged: unsettled.
  assert analysis.settle_step([(0, 'a'), (20, 'b')]) is None
  assert analysis.settle_step([]) is None


def test_logged_architectures_read_one_controllers_logits():
  spec = search_spaces.get('proxylessnas_search').spec()
  decisions = schema.decisions(spec)
  scalars = {}
  for step, best in ((20, 0), (40, 1)):
    for d in decisions:
      for j in range(d.num_choices):
        # Target 1's controller prefers the last choice at step 40, the
        # first at 20; the first target's, the first throughout.
        last = j == d.num_choices - 1
        scalars.setdefault('retarget_1/' + controller.path_logit_tag(d, j),
                           []).append((step, float(last if best else j == 0)))
        scalars.setdefault(controller.path_logit_tag(d, j), []).append(
            (step, float(j == 0)))
  history = analysis.logged_architectures(scalars, spec, 'retarget_1/')
  assert [step for step, _ in history] == [20, 40]
  assert history[0][1] == architecture.canonicalize(
      spec, [0] * len(decisions))
  assert history[1][1] == architecture.canonicalize(
      spec, [d.num_choices - 1 for d in decisions])
  assert history[1][1] != history[0][1]
  own = analysis.logged_architectures(scalars, spec)
  assert [arch for _, arch in own] == [history[0][1]] * 2
