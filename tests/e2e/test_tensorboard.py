"""A tiny search read back through TensorBoard's own data provider and its
Custom Scalars plugin: what a browser would be served, without a browser."""

import json

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.custom_scalar import custom_scalars_plugin
from tensorboard.plugins.scalar import scalars_plugin

from tests.e2e import tiny
from tunas_search.results import analysis
from tunas_search.controller import policy as controller
from tunas_search.search import runner
from tunas_search.space import schema
from tunas_search.results import summaries

# Host loops and checkpoints every 2 steps; the last step, 5, is neither.
TOTAL = 5
RUN = '.'  # The model dir itself, as TensorBoard names it.
# Each probability is a float32 softmax (a few ulps of error, ulp <= 6e-8 for
# values <= 1), so a sum over at most 3 choices is 1 within ~1e-6.
SUM_TOLERANCE = 1e-6
# float32 softmax in the graph against analysis's float64 softmax of the
# same float32 logits.
PROB_TOLERANCE = 1e-6


class _TensorBoard:
  """The scalars and custom scalars plugins over one logdir."""

  def __init__(self, logdir: str):
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        size_guidance={'tensors': 0})  # Keep every point.
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    context = base_plugin.TBContext(
        logdir=logdir, plugin_name_to_instance={},
        data_provider=data_provider.MultiplexerDataProvider(multiplexer,
                                                            logdir))
    context.plugin_name_to_instance['scalars'] = scalars_plugin.ScalarsPlugin(
        context)
    self.custom = custom_scalars_plugin.CustomScalarsPlugin(context)
    self.ctx = tb_context.RequestContext()

  def layout(self):
    return json.loads(self.custom.layout_impl(self.ctx, experiment=''))

  def chart(self, regex: str):
    """tag -> {step: value}, as the dashboard's multiline chart gets them."""
    response = self.custom.scalars_impl(self.ctx, RUN, regex, experiment='')
    assert response['regex_valid']
    return {tag: {step: value for _, step, value in events}
            for tag, events in response['tag_to_events'].items()}


@pytest.fixture(scope='module')
def search(tmp_path_factory):
  config = tiny.tiny_config(tmp_path_factory.mktemp('tensorboard'),
                            max_steps=TOTAL)
  runner.run_search(config, tiny.tiny_spec())
  return config, _TensorBoard(config.model_dir)


def _decisions():
  return schema.decisions(tiny.tiny_spec())


def test_layout_has_one_chart_per_multi_choice_decision(search):
  _, board = search
  layout = board.layout()
  decisions = summaries.charted(_decisions())
  assert [c['title'] for c in layout['category']] == [
      summaries.SEARCH_CATEGORY, 'blocks/0', 'blocks/1']
  charts = [chart for c in layout['category'][1:] for chart in c['chart']]
  assert [c['title'] for c in charts] == [
      f'{d.path} ({d.tag_name})' for d in decisions]
  for d, chart in zip(decisions, charts):
    regex, = chart['multiline']['tag']
    # Among every tag of the run, the regex reaches this decision's
    # probabilities and nothing else (nested decisions share prefixes).
    assert sorted(board.chart(regex)) == sorted(summaries.prob_tags(d))


def test_search_charts_show_cost_reward_and_accuracy(search):
  config, board = search
  charts = {c['title']: c['multiline']['tag'][0]
            for c in board.layout()['category'][0]['chart']}
  cost = board.chart(charts['estimated cost vs target'])
  assert sorted(cost) == ['rlcontroller/cost_target',
                          'rlcontroller/estimated_cost']
  assert set(cost['rlcontroller/cost_target'].values()) == {
      config.rl_cost_model_target}
  assert sorted(board.chart(charts['reward vs baseline'])) == [
      'rlcontroller/baseline', 'rlcontroller/reward']
  assert list(board.chart(charts['validation accuracy'])) == [
      'rlcontroller/validation_accuracy']


def test_steps_are_loops_checkpoints_and_the_last(search):
  _, board = search
  every_tag = board.chart('.*')
  assert len(every_tag) > 40
  for tag, points in every_tag.items():
    assert sorted(points) == [2, 4, TOTAL], tag


def test_probabilities_sum_to_one_at_every_step(search):
  _, board = search
  for d in summaries.charted(_decisions()):
    series = board.chart(summaries.prob_regex(d))
    for step in (2, 4, TOTAL):
      total = sum(points[step] for points in series.values())
      assert total == pytest.approx(1.0, abs=SUM_TOLERANCE), (d.path, step)


def test_last_point_is_the_final_checkpoint(search):
  config, board = search
  result = analysis.analyze(config.model_dir)
  assert result.step == TOTAL and result.source == analysis.CHECKPOINT
  for d, report in zip(_decisions(), result.decisions):
    assert report.path == d.path
    if summaries.is_charted(d):
      series = board.chart(summaries.prob_regex(d))
      charted = [series[tag][TOTAL] for tag in summaries.prob_tags(d)]
      np.testing.assert_allclose(charted, report.probabilities,
                                 atol=PROB_TOLERANCE)
    else:
      assert not board.chart(summaries.prob_regex(d))


def test_logged_logits_equal_every_checkpoint(search):
  """The logits are read after the controller's update: the value at step n
  is, bit for bit, what the checkpoint of step n holds."""
  config, board = search
  decisions = _decisions()
  checkpoints = analysis.checkpoint_steps(config.model_dir)
  assert TOTAL in checkpoints
  logits = board.chart('^rlpathlogits/')
  for step, prefix in checkpoints.items():
    if step == 0:
      continue  # The initial checkpoint, before any step logs anything.
    saved = controller.read_logit_values(prefix, decisions)
    for d, values in zip(decisions, saved):
      logged = [logits[controller.path_logit_tag(d, j)][step]
                for j in range(d.num_choices)]
      np.testing.assert_array_equal(np.float32(logged), values)
