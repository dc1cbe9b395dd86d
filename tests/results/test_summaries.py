"""Tests for the search's TensorBoard output: choice names, tags, the layout
and when the host_call writes (docs/method.md section 6)."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.custom_scalar import custom_scalars_plugin
from tensorflow.python.ops import summary_ops_v2  # pylint: disable=g-direct-tensorflow-import

import search_spaces
from tests.e2e import tiny
from tunas_search.space import schema
from tunas_search.search import model_fn as search
from tunas_search.results import summaries
from tunas_search.runtime import host_call
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      Residual, SeparableConv,
                                      UniversalInvertedBottleneck)

tf1 = tf.compat.v1


def _names(spec):
  return {d.path: summaries.choice_names(d) for d in schema.decisions(spec)}


def test_choice_names_of_the_tiny_space():
  assert _names(tiny.tiny_spec()) == {
      'blocks/0/filters': ['w8', 'w16'],
      'blocks/1/layers/0/kernel_size': ['k3', 'k5'],
      'blocks/1/layers/0/expansion_filters': ['e1', 'e3'],
      'blocks/1/layers/1/layer/choices/0/kernel_size': ['k3', 'k5'],
      'blocks/1/layers/1/layer/choices/0/expansion_filters': ['e1', 'e3'],
      # The bottleneck still holds decisions: only its kind names it.
      'blocks/1/layers/1/layer': ['ib', 'skip'],
      'blocks/1/filters': ['w8', 'w16', 'w24'],
  }


def test_choice_names_of_squeeze_excite_and_layer_records():
  bneck = DepthwiseBottleneck(5, FilterMultiplier(6.0), strides=2)
  spec = ConvTower((Block((
      OneOf([SeparableConv(3), SeparableConv(5, activation='relu6')],
            schema.OP),
      DepthwiseBottleneck(3, FilterMultiplier(0.5),
                          use_squeeze_and_excite=OneOf([False, True],
                                                       schema.OP)),
      OneOf([bneck, Residual(bneck), Conv(1)], schema.OP),
  ), 16),))
  assert list(_names(spec).values()) == [
      ['sep3_relu', 'sep5_relu6'],
      ['nose', 'se'],
      ['ib_k5_e6_s2_relu', '+ib_k5_e6_s2_relu', 'conv1'],
  ]


def test_choice_names_of_uib_kernels():
  uib = UniversalInvertedBottleneck(OneOf([0, 3, 5], schema.OP),
                                    OneOf([3, 5], schema.OP),
                                    FilterMultiplier(4.0), strides=2)
  spec = ConvTower((Block((OneOf([uib, Conv(3, strides=2)], schema.OP),),
                          16),))
  assert _names(spec) == {
      'blocks/0/layers/0/choices/0/start_kernel_size': ['none', 'k3', 'k5'],
      'blocks/0/layers/0/choices/0/middle_kernel_size': ['k3', 'k5'],
      'blocks/0/layers/0': ['uib', 'conv3_s2'],
  }


@pytest.mark.parametrize('choices, tag, expected', [
    # Equal names fall back to the indices.
    ([Conv(OneOf([3, 5], schema.OP)), Conv(OneOf([3, 7], schema.OP))],
     schema.OP, ['0', '1']),
    # A `/` would split the tag: indices too.
    (['a/b', 'c'], schema.OP, ['0', '1']),
    ([0.25, 1.0], schema.FILTERS, ['0.25', '1']),
    ([1, 2], schema.OP, ['1', '2']),  # An int that is no kernel or width.
])
def test_choice_names_fall_back_and_format_plain_values(choices, tag,
                                                        expected):
  decision, = [d for d in schema.decisions({'x': OneOf(choices, tag)})
               if d.path == 'x']
  assert summaries.choice_names(decision) == expected
  assert [summaries.choice_name(decision, j)
          for j in range(len(choices))] == expected


@pytest.mark.parametrize('space', search_spaces.names())
def test_prob_regex_matches_exactly_its_own_decision(space):
  """Nested decisions share path prefixes; no regex may reach another's."""
  decisions = summaries.charted(schema.decisions(
      search_spaces.get(space).spec()))
  every_tag = [t for d in decisions for t in summaries.prob_tags(d)]
  assert len(set(every_tag)) == len(every_tag)
  for d in decisions:
    regex = re.compile(summaries.prob_regex(d))
    assert [t for t in every_tag if regex.match(t)] == summaries.prob_tags(d)


def test_layout_of_the_tiny_space():
  spec = tiny.tiny_spec()
  layout = summaries.layout(spec, with_cost=True)
  titles = [c.title for c in layout.category]
  assert titles == [summaries.SEARCH_CATEGORY, 'blocks/0', 'blocks/1']
  search_charts = {c.title: c.multiline.tag[0]
                   for c in layout.category[0].chart}
  assert search_charts == {
      'estimated cost vs target':
          '^(rlcontroller/estimated_cost|rlcontroller/cost_target)$',
      'reward vs baseline': '^(rlcontroller/reward|rlcontroller/baseline)$',
      'validation accuracy': '^(rlcontroller/validation_accuracy)$'}
  charts = [(c.title, c.multiline.tag[0])
            for category in layout.category[1:] for c in category.chart]
  decisions = schema.decisions(spec)
  assert charts == [(f'{d.path} ({d.tag_name})', summaries.prob_regex(d))
                    for d in decisions]
  assert charts[0] == ('blocks/0/filters (filters_indices_0)',
                       '^rlprobs/blocks/0/filters/[^/]+$')


def test_layout_skips_one_choice_decisions_and_a_missing_cost():
  spec = search_spaces.get('proxylessnas_search').spec()
  layout = summaries.layout(spec, with_cost=False)
  assert [c.title for c in layout.category[0].chart] == [
      'reward vs baseline', 'validation accuracy']
  charted = [c.title for category in layout.category[1:]
             for c in category.chart]
  decisions = schema.decisions(spec)
  assert len(charted) == sum(d.num_choices > 1 for d in decisions)
  assert 'blocks/0/filters (filters_indices_0)' not in charted  # One width.


def _tensorboard(logdir):
  """TensorBoard's data provider and Custom Scalars plugin over `logdir`."""
  multiplexer = plugin_event_multiplexer.EventMultiplexer(
      size_guidance={'tensors': 0})
  multiplexer.AddRunsFromDirectory(str(logdir))
  multiplexer.Reload()
  provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
  return custom_scalars_plugin.CustomScalarsPlugin(base_plugin.TBContext(
      logdir=str(logdir), data_provider=provider,
      plugin_name_to_instance={}))


def test_write_layout_is_what_tensorboard_serves(tmp_path):
  spec = tiny.tiny_spec()
  config = tiny.tiny_config(tmp_path)
  path = summaries.write_layout(config, spec)
  assert summaries.write_layout(config, spec) == path  # Rewritten in place.
  assert sorted(os.listdir(tmp_path)) == [summaries.LAYOUT_FILENAME]
  served = json.loads(_tensorboard(tmp_path).layout_impl(
      tb_context.RequestContext(), experiment=''))
  layout = summaries.layout(spec, with_cost=True)
  assert [c['title'] for c in served['category']] == [
      c.title for c in layout.category]
  assert [[chart['multiline']['tag'] for chart in c['chart']]
          for c in served['category']] == [
              [list(chart.multiline.tag) for chart in c.chart]
              for c in layout.category]


def test_logit_summaries_hold_probabilities_of_multi_choice_decisions():
  spec = {'one': OneOf([3], schema.OP), 'two': OneOf([3, 5, 7], schema.OP)}
  decisions = schema.decisions(spec)
  values = [np.array([0.5], np.float32), np.array([1.0, 2.0, -1.0],
                                                  np.float32)]
  with tf.Graph().as_default(), tf1.Session() as sess:
    tensors = search.logit_summaries(decisions,
                                     [tf.constant(v) for v in values])
    assert all(t.shape == [] for t in tensors.values())
    scalars = sess.run(tensors)
    # Packed for the host call, they hold the same values.
    names, packed = host_call.pack_summaries(tensors)
    assert dict(zip(names, sess.run(packed)[0].tolist())) == pytest.approx(
        scalars)
  probs = {k: v for k, v in scalars.items() if k.startswith('rlprobs/')}
  expected = np.exp(values[1]) / np.exp(values[1]).sum()
  assert sorted(probs) == ['rlprobs/two/3', 'rlprobs/two/5', 'rlprobs/two/7']
  # float32 softmax against float64: a few ulps.
  np.testing.assert_allclose([probs[f'rlprobs/two/{k}'] for k in (3, 5, 7)],
                             expected, rtol=1e-6)
  assert scalars['rlpathlogits/one/0'] == 0.5
  assert scalars['rltaglogits/op_indices_1/2'] == -1.0

  # Grouped logits of the wrong shape are refused, not mislabelled.
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match=r'logits for 3 choices have shape '
                       r'\(2, 3\); expected \[1, 3\]'):
      search.logit_summaries(decisions, {3: tf.zeros([2, 3])})


@pytest.mark.parametrize('every, final, expected', [
    (2, None, [0, 2, 4, 6]),
    ([3, 4], None, [0, 3, 4, 6]),
    ([3, 4], 7, [0, 3, 4, 6, 7]),
])
def test_should_record(every, final, expected):
  with tf.Graph().as_default():
    step = tf1.placeholder(tf.int64, [])
    record = host_call.should_record(step, every, final)
    with tf1.Session() as sess:
      recorded = [s for s in range(8) if sess.run(record, {step: s})]
  assert recorded == expected


def _logged(logdir, tag):
  multiplexer = plugin_event_multiplexer.EventMultiplexer(
      size_guidance={'tensors': 0})
  multiplexer.AddRunsFromDirectory(str(logdir))
  multiplexer.Reload()
  if tag not in multiplexer.Runs().get('.', {}).get('tensors', []):
    return []
  return [(e.step, float(tf.make_ndarray(e.tensor_proto)))
          for e in multiplexer.Tensors('.', tag)]


def test_host_call_flushes_each_recorded_step(tmp_path):
  """What a recorded step wrote is on disk at once, so a run killed after it
  loses nothing; steps in between neither write nor flush."""
  with tf.Graph().as_default():
    step = tf1.placeholder(tf.int64, [])
    names, packed = host_call.pack_summaries(
        {'x': tf.cast(step, tf.float32) * 2})
    fn, tensors = host_call.make_host_call(str(tmp_path), names, packed, step,
                                           every_n_steps=[4], final_step=5)
    ops = fn(*tensors)
    # TPUEstimator's host-call hook runs the writers' init ops (and flushes
    # them only when the session ends); this test does the same by hand and
    # reads the events while the session, and its writer, are still open.
    init = summary_ops_v2.summary_writer_initializer_op()
    with tf1.Session() as sess:
      sess.run(init)
      seen = []
      for s in range(1, 6):
        sess.run(ops, {step: s})
        seen.append(_logged(tmp_path, 'x'))
  assert seen == [[], [], [], [(4, 8.0)], [(4, 8.0), (5, 10.0)]]
