"""Dead gradients of unused weights: values, deadness, and a search step."""

import contextlib
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.search import model_fn as search
from tunas_search.config import plan as plan_lib
from tunas_search.supernet import ops
from tunas_search.tf_internals import dead_gradients

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'e2e'))
import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position

tf1 = tf.compat.v1
VALUE = np.array([1.0, -2.0, 3.0], np.float32)


def _is_dead(session, tensor, feed) -> bool:
  """Whether `tensor` has no value in this run (a dead tensor)."""
  try:
    session.run(tensor, feed)
  except tf.errors.InvalidArgumentError as e:
    assert 'does not have value' in str(e)
    return True
  return False


def _weight():
  """A weight and its read, as the search's snapshots read it."""
  var = tf1.get_variable('w', initializer=VALUE)
  return var, var.read_value()


def test_a_switch_in_a_cond_keeps_tensorflows_zero_gradient():
  # `route`'s gradient applies to Switches outside any cond: one a cond
  # builds for a listed read still gives TensorFlow's zeros.
  with tf.Graph().as_default():
    var, read = _weight()
    pred = tf1.placeholder(tf.bool, [])
    graph = tf1.get_default_graph()
    with ops.v1_control_flow(), graph.gradient_override_map(
        {'Switch': dead_gradients.SWITCH_GRADIENT}):
      y = tf.cond(pred, lambda: tf.reduce_sum(read * read),
                  lambda: tf.constant(0.0))
    with dead_gradients.dead_when_unused([read]):
      grad, = tf.gradients(y, [var])
    with tf1.Session() as sess:
      sess.run(var.initializer)
      np.testing.assert_allclose(sess.run(grad, {pred: True}), 2 * VALUE)
      np.testing.assert_array_equal(sess.run(grad, {pred: False}),
                                    np.zeros(3))


def test_route_gives_a_narrowed_read_a_dead_gradient():
  # A weight sliced to a sampled width (`widths.narrow`) and routed. (The
  # loss's gradient reads the routed value, as a decay term's does.)
  with tf.Graph().as_default():
    var, read = _weight()
    pred = tf1.placeholder(tf.bool, [])
    routed = dead_gradients.route(tf.strided_slice(read, [0], [2], [1]),
                                  pred)
    loss = tf.reduce_sum(routed * routed)
    with dead_gradients.dead_when_unused([read]):
      grad, = tf.gradients(loss, [var])
    unlisted, = tf.gradients(loss, [var])
    with tf1.Session() as sess:
      sess.run(var.initializer)
      np.testing.assert_array_equal(sess.run(grad, {pred: True}),
                                    [2.0, -4.0, 0.0])
      assert _is_dead(sess, grad, {pred: False})
      # Outside `dead_when_unused`: TensorFlow's gradient, zeros.
      np.testing.assert_array_equal(sess.run(unlisted, {pred: False}),
                                    np.zeros(3))


def test_route_and_or_zero():
  with tf.Graph().as_default():
    var, read = _weight()
    pred = tf1.placeholder(tf.bool, [])
    routed = dead_gradients.route(read, pred)
    loss = dead_gradients.or_zero(tf.reduce_sum(routed * routed), pred)
    with dead_gradients.dead_when_unused([read]):
      grad, = tf.gradients(loss, [var])
    with tf1.Session() as sess:
      sess.run(var.initializer)
      assert sess.run(loss, {pred: True}) == pytest.approx(14.0)
      assert sess.run(loss, {pred: False}) == 0.0
      np.testing.assert_allclose(sess.run(grad, {pred: True}), 2 * VALUE)
      assert _is_dead(sess, grad, {pred: False})


@pytest.mark.parametrize('num_inputs', [2, 3, 4])
def test_merge_gradient_is_tensorflows_with_fewer_ops(num_inputs):
  # A context-free Merge of routed copies of x, exactly one live: each
  # input's gradient is the Merge's where it was the live input and dead
  # elsewhere, as TensorFlow's gradient gives, from one Switch per input
  # after the first and no constant per input.
  with tf.Graph().as_default() as graph:
    x = tf1.placeholder_with_default(VALUE, [3])
    live = tf1.placeholder(tf.int32, [])
    inputs = [tf.raw_ops.Switch(data=x * float(i + 1),
                                pred=tf.equal(live, i))[1]
              for i in range(num_inputs)]
    merged = {}
    for form in ('tensorflow', 'merges'):
      with contextlib.ExitStack() as stack:
        if form == 'merges':
          stack.enter_context(dead_gradients.merges())
        merged[form] = tf.raw_ops.Merge(inputs=inputs).output
    grads, built = {}, {}
    for form, out in merged.items():
      before = len(graph.get_operations())
      grads[form] = tf.gradients(tf.reduce_sum(out * out), inputs)
      built[form] = graph.get_operations()[before:]
    switches = [op for op in built['merges'] if op.type == 'Switch']
    assert len(switches) == num_inputs - 1
    assert len(built['merges']) < len(built['tensorflow'])
    with tf1.Session() as sess:
      for i in range(num_inputs):
        for want, got, j in zip(grads['tensorflow'], grads['merges'],
                                range(num_inputs)):
          if j == i:
            np.testing.assert_allclose(sess.run(got, {live: i}),
                                       sess.run(want, {live: i}))
            np.testing.assert_allclose(sess.run(got, {live: i}),
                                       2 * (i + 1) * VALUE)
          else:
            assert _is_dead(sess, want, {live: i})
            assert _is_dead(sess, got, {live: i})


@pytest.mark.parametrize('skip_used', [True, False])
def test_route_gradient_is_tensorflows_without_its_guards(skip_used):
  # A routing Switch whose outputs feed Merges (the skip side possibly
  # nothing, as the last branch's): the gradient of its input is the one
  # TensorFlow gives, in both directions, from no Switch of its own.
  with tf.Graph().as_default() as graph:
    x = tf1.placeholder_with_default(VALUE, [3])
    pred = tf1.placeholder(tf.bool, [])
    outputs = {}
    for form in ('tensorflow', 'routing'):
      with contextlib.ExitStack() as stack:
        stack.enter_context(dead_gradients.routing() if form == 'routing'
                            else dead_gradients.merges())
        skip, take = tf.raw_ops.Switch(data=x, pred=pred)
        other = tf.raw_ops.Switch(data=x, pred=tf.logical_not(pred))[1]
        inputs = [2.0 * take, 3.0 * (skip if skip_used else other)]
        outputs[form] = tf.raw_ops.Merge(inputs=inputs).output
    grads, built = {}, {}
    for form, out in outputs.items():
      before = len(graph.get_operations())
      grads[form], = tf.gradients(tf.reduce_sum(out * out), [x])
      built[form] = [op.type for op in graph.get_operations()[before:]]
    # TensorFlow's two guards per routing Switch on the gradient's path
    # (one Switch of x, or two when `other` is used), none in the routing
    # form; both forms fill zeros for an output without consumers alike.
    assert (built['tensorflow'].count('Switch')
            - built['routing'].count('Switch')) == (2 if skip_used else 4)
    with tf1.Session() as sess:
      for value, scale in ((True, 2.0), (False, 3.0)):
        want = sess.run(grads['tensorflow'], {pred: value})
        np.testing.assert_allclose(want, 2 * scale ** 2 * VALUE)
        np.testing.assert_allclose(sess.run(grads['routing'], {pred: value}),
                                   want)


def test_merge_gradient_in_a_cond_is_tensorflows():
  # A cond's own Merge (built in a cond context) keeps TensorFlow's
  # gradient, which routes by the cond's predicate.
  with tf.Graph().as_default():
    x = tf1.placeholder_with_default(VALUE, [3])
    pred = tf1.placeholder(tf.bool, [])
    with ops.v1_control_flow(), dead_gradients.merges():
      y = tf.cond(pred, lambda: 2.0 * x, lambda: 3.0 * x)
    grad, = tf.gradients(tf.reduce_sum(y), [x])
    with tf1.Session() as sess:
      np.testing.assert_allclose(sess.run(grad, {pred: True}), [2.0] * 3)
      np.testing.assert_allclose(sess.run(grad, {pred: False}), [3.0] * 3)


def _zero_gradient_fills(tmp_path, mode: str, steps: int = 3) -> int:
  """Fill ops run by the gradients of `steps` tiny search steps."""
  # No warm-up: the sampled architectures leave ops unused from step 0.
  config = tiny.tiny_config(tmp_path, unused_weight_steps=mode, max_steps=100,
                            increase_ops_warmup_steps_fraction=0.0,
                            increase_filters_warmup_steps_fraction=0.0)
  rng = np.random.RandomState(1)
  with tf.Graph().as_default() as graph:
    features = {
        'train_images': tf.constant(rng.rand(4, 28, 28, 1), tf.float32),
        'validation_images': tf.constant(rng.rand(16, 28, 28, 1),
                                         tf.float32)}
    labels = {'train_labels': tf.constant(rng.randint(10, size=4)),
              'validation_labels': tf.constant(rng.randint(10, size=16))}
    plan = plan_lib.resolve(config)
    spec = search.make_model_fn(config, plan, tiny.tiny_spec())(
        features, labels, tf.estimator.ModeKeys.TRAIN, {})
    types = {op.name: op.type for op in graph.get_operations()}
    fills = 0
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for _ in range(steps):
        metadata = tf1.RunMetadata()
        _, loss = sess.run([spec.train_op, spec.loss],
                           options=tf1.RunOptions(
                               trace_level=tf1.RunOptions.FULL_TRACE),
                           run_metadata=metadata)
        assert np.isfinite(loss)
        # Step stats list the ops that ran (dead ones do not).
        fills += sum(types.get(node.node_name) == 'Fill'
                     and node.node_name.startswith('gradients/')
                     for dev in metadata.step_stats.dev_stats
                     for node in dev.node_stats)
  return fills


def test_a_deferred_search_step_fills_no_zero_gradients(tmp_path):
  # TuNAS's optimiser steps every weight, so an unused one gets a zero
  # gradient (filled each step); the deferred update skips it, and its
  # gradient is dead instead.
  assert _zero_gradient_fills(tmp_path / 'every', 'every_step') > 0
  assert _zero_gradient_fills(tmp_path / 'deferred', 'deferred') == 0

