"""Tests of the builder's layers on tiny specs: masks, BN, dtypes, weights."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search import architecture
from tunas_search import schema
from tunas_search.schema import OneOf
from tunas_search.specs import (Activation, Block, Conv, ConvTower,
                                DepthwiseBottleneck, FilterMultiplier,
                                Residual, Zero)
from tunas_search.supernet import build_network
from tunas_search.supernet import ops
from tunas_search.supernet import regularization_loss
from tunas_search.supernet import slice_to_shape
from tunas_search.supernet import supernet_assignments
from tunas_search.supernet import widths
from tunas_search.supernet.builder import build_layer



def _run(fetches, graph):
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(tf.compat.v1.global_variables_initializer())
    return session.run(fetches)


def _tiny_spec() -> ConvTower:
  """Stem conv, a searched bottleneck with SE, a skippable residual one."""
  bneck = DepthwiseBottleneck(
      OneOf((3, 5), schema.OP),
      OneOf((FilterMultiplier(1.0), FilterMultiplier(2.0)), schema.FILTERS),
      OneOf((False, True), schema.OP), strides=2, activation='swish6')
  res = DepthwiseBottleneck(3, FilterMultiplier(2.0))
  return ConvTower((
      Block((Conv(3, strides=2), Activation('relu')),
            OneOf((8, 16), schema.FILTERS)),
      Block((bneck, Residual(OneOf((res, Zero()), schema.OP))),
            OneOf((8, 16), schema.FILTERS)),
  ))


def _images(batch=4, size=16, channels=1, seed=0):
  return np.random.default_rng(seed).normal(
      size=(batch, size, size, channels)).astype(np.float32)


def test_masked_off_channels_are_exactly_zero():
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)  # The initial weights.
    ctx = ops.BuildContext(True, 'batch', tf.float32)
    out = widths.block_width(
        schema.with_masks(OneOf((8, 16, 24), schema.FILTERS),
                          [tf.constant([0.0, 1.0, 0.0])]), 'f')
    x = tf.constant(_images(channels=4))
    layer = DepthwiseBottleneck(3, FilterMultiplier(2.0),
                                OneOf((False, True), schema.OP,
                                      mask=tf.constant([0.5, 0.5])))
    y = build_layer(layer, 'b', widths.fixed(4), out, ctx).apply(x)
    y = _run(y, graph)
  assert y.shape == (4, 16, 16, 24)
  assert np.all(y[..., 16:] == 0)
  assert np.all(np.abs(y[..., :16]).sum(axis=(0, 1, 2)) > 0)


def test_uniform_mask_averages_and_unselected_op_is_not_run():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(2.0)

    def failing(x, c):
      check = tf.debugging.Assert(False, ['unselected branch ran'])
      with tf.control_dependencies([check]):
        return x * c
    with ops.v1_control_flow():
      both = ops.switch(x, [(tf.constant(0.5), lambda x, c: 3 * x * c),
                            (tf.constant(0.5), lambda x, c: 5 * x * c)],
                        None, lambda: tf.zeros([]))
      second = ops.switch(x, [(tf.constant(0.0), failing),
                              (tf.constant(1.0), lambda x, c: 5 * x * c)],
                          tf.constant(1.0), lambda: tf.zeros([]))
    assert _run([both, second], graph) == [8.0, 11.0]


def test_bfloat16_matches_float32():
  spec = _tiny_spec()
  masks = [np.eye(d.num_choices, dtype=np.float32)[-1]
           for d in schema.decisions(spec)]
  outputs = {}
  for dtype in (tf.float32, tf.bfloat16):
    graph = tf.Graph()
    with graph.as_default():
      tf.compat.v1.set_random_seed(0)
      logits = build_network(
          schema.with_masks(spec, [tf.constant(m) for m in masks]),
          tf.constant(_images()), 5, is_training=True,
          batch_norm_mode='batch', dtype=dtype)
      assert logits.dtype == tf.float32
      outputs[dtype] = _run(logits, graph)
  assert np.all(np.isfinite(outputs[tf.bfloat16]))
  # bfloat16 keeps 8 significant bits (relative rounding 2^-9 = 0.2% per op);
  # over the stem, two bottlenecks and the classifier that adds up to a few
  # hundredths on these O(1) logits.
  np.testing.assert_allclose(outputs[tf.bfloat16], outputs[tf.float32],
                             atol=0.05)


def test_path_dropout_only_when_training():
  spec = architecture.with_indices(_tiny_spec(), [1, 0, 1, 1, 0, 1])
  graph = tf.Graph()
  with graph.as_default():
    # Seeds the dropout draws (and the initial weights): unseeded, all four
    # training passes drop the same examples about once in 4,096 runs.
    tf.compat.v1.set_random_seed(0)
    images = tf.constant(_images())
    kwargs = dict(batch_norm_mode='stateful', path_dropout_rate=0.5)
    plain = build_network(spec, images, 5, is_training=False,
                          batch_norm_mode='stateful')
    evals = build_network(spec, images, 5, is_training=False, **kwargs)
    train = [build_network(spec, images, 5, is_training=True, **kwargs)
             for _ in range(4)]
    plain, evals, train = _run([plain, evals, train], graph)
  np.testing.assert_array_equal(plain, evals)
  assert any(np.abs(t - train[0]).max() > 1e-4 for t in train[1:])


def test_stateful_batch_norm_updates_and_uses_moving_averages():
  graph = tf.Graph()
  x_value = _images(channels=3)
  with graph.as_default():
    x = tf.constant(x_value)
    train_ctx = ops.BuildContext(True, 'stateful', tf.float32)
    bn = ops.batch_norm_vars('bn', 3, train_ctx)
    y_train = ops.batch_norm(x, bn, train_ctx)
    updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
    eval_ctx = ops.BuildContext(False, 'stateful', tf.float32)
    y_eval = ops.batch_norm(x, bn, eval_ctx)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      y, _ = session.run([y_train, updates])
      mean, var = session.run([bn.moving_mean, bn.moving_variance])
      y2 = session.run(y_eval)
  assert len(updates) == 2
  batch_mean = x_value.mean(axis=(0, 1, 2))
  # float32 statistics of 1,024 values per channel against float64 numpy: a
  # few ulps on the O(1) variances and O(0.01) means. The normalised outputs
  # (O(3)) divide by sqrt(var + 1e-3), which amplifies those to ~1e-5,
  # hence atol=1e-4 on them below.
  np.testing.assert_allclose(mean, 0.01 * batch_mean, atol=1e-6)
  np.testing.assert_allclose(
      var, 0.99 + 0.01 * x_value.reshape(-1, 3).var(axis=0, ddof=1),
      atol=1e-6)
  np.testing.assert_allclose(
      y, (x_value - batch_mean) / np.sqrt(x_value.reshape(-1, 3).var(0) +
                                          1e-3), atol=1e-4)
  np.testing.assert_allclose(y2, (x_value - mean) / np.sqrt(var + 1e-3),
                             atol=1e-4)


def test_stateful_training_inside_searched_op_is_rejected():
  with tf.Graph().as_default():
    spec = schema.with_masks(
        _tiny_spec(), [tf.constant(np.eye(d.num_choices, dtype=np.float32)[0])
                       for d in schema.decisions(_tiny_spec())])
    with pytest.raises(ValueError, match='stateful batch norm'):
      build_network(spec, tf.constant(_images()), 5, is_training=True,
                    batch_norm_mode='stateful')


def test_regularization_loss_hand_checked():
  with tf.Graph().as_default() as graph:
    def var(name, value):
      scope, leaf = name.rsplit('/', 1)
      return ops.get_var(scope, leaf, np.shape(value),
                         tf.compat.v1.constant_initializer(value))
    variables = [
        var('net/b/conv_k3/kernel', np.full([3, 3, 1, 2], 2.0)),  # 18 * 4
        var('net/b/depthwise_k5/kernel', np.ones([5, 5, 1, 1])),  # 25
        var('net/b/se/reduce/bias', np.ones([4])),
        var('net/b/bn_k3/gamma', np.ones([2])),
        var('net/classifier/kernel', np.ones([2, 3])),
    ]
    loss = regularization_loss(4e-5)
    # A float32 sum of squares of exact small integers: default rel=1e-6.
    assert _run(loss, graph) == pytest.approx(4e-5 / 2 * (72 + 25))
    assert _run(regularization_loss(1.0, variables[2:]), graph) == 0.0


def test_slice_to_shape_and_assignments():
  value = np.arange(24).reshape(2, 3, 4)
  np.testing.assert_array_equal(slice_to_shape(value, (1, 2, 2)),
                                [[[0, 1], [4, 5]]])
  with pytest.raises(ValueError):
    slice_to_shape(value, (3, 3, 4))
  with tf.Graph().as_default():
    kernel = ops.get_var('a', 'kernel', [1, 2], None)
    mean = ops.get_var('a', 'moving_mean', [2], None, trainable=False)
    pairs = supernet_assignments({'a/kernel:0': np.ones([3, 4])})
    assert [(v, x.shape) for v, x in pairs] == [(kernel, (1, 2))]
    del mean  # Missing moving statistics are skipped.
    with pytest.raises(KeyError, match='a/kernel'):
      supernet_assignments({'b/kernel': np.ones([3, 4])})
