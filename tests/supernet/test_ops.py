"""Tests of the builder's layers on tiny specs: masks, BN, dtypes, weights."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      Residual, Zero)
from tunas_search.supernet import build_network
from tunas_search.supernet import forms
from tunas_search.supernet import ops
from tunas_search.supernet import regularization_loss
from tunas_search.supernet import slice_to_shape
from tunas_search.supernet import supernet_assignments
from tunas_search.supernet import widths
from tunas_search.supernet import WeightUses
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
                        None, lambda x: tf.zeros([]))
      second = ops.switch(x, [(tf.constant(0.0), failing),
                              (tf.constant(1.0), lambda x, c: 5 * x * c)],
                          tf.constant(1.0), lambda x: tf.zeros([]))
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
          tf.constant(_images()), 5, forms.every_step('masked'),
          dtype=dtype)
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
    plain = build_network(spec, images, 5, forms.standalone(False))
    evals = build_network(spec, images, 5, forms.standalone(
        False, path_dropout_rate=0.5))
    train = [build_network(spec, images, 5, forms.standalone(
        True, path_dropout_rate=0.5)) for _ in range(4)]
    plain, evals, train = _run([plain, evals, train], graph)
  np.testing.assert_array_equal(plain, evals)
  assert any(np.abs(t - train[0]).max() > 1e-4 for t in train[1:])


@pytest.mark.float_paths
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
      build_network(spec, tf.constant(_images()), 5,
                    forms.standalone(is_training=True))


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


def _random_masks(spec, rng):
  """Per op decision: a random subset of choices (maybe none, maybe several,
  as in op warm-up) with positive entries; one width per width decision,
  entry 1 (as the search samples them)."""
  masks = []
  for d in schema.decisions(spec):
    on = rng.random(d.num_choices) < 0.5
    if d.tag == schema.FILTERS:
      on = np.arange(d.num_choices) == rng.integers(d.num_choices)
    entries = rng.uniform(0.5, 1.5, d.num_choices)
    masks.append(np.where(on, 1.0 if d.tag == schema.FILTERS else entries,
                          0.0).astype('f4'))
  return masks


def _loss_and_gradients(spec, for_xla, width_form=widths.MASKED, uses=None):
  """Builds `spec` once with fed masks; returns its session and a function.

  The function takes one mask per decision and returns [loss, its terms'
  magnitude], the gradients of images and weights, and 2 lists. With `uses`
  (a build without conds), a weight whose gradient is dead is left out of
  the gradients and listed first; the second list names the weights whose
  every recorded op scale is 0. Both are empty without `uses`.
  """
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    images = tf.constant(_images(channels=3))
    fed = [tf.compat.v1.placeholder(tf.float32, [d.num_choices])
           for d in schema.decisions(spec)]
    if for_xla:
      form = forms.xla()
    elif uses is not None:
      form = forms.deferred(width_form)
    else:
      form = forms.every_step(width_form)
    logits = build_network(schema.with_masks(spec, fed), images, 5, form,
                           uses=uses)
    loss, magnitude = _projected_loss(logits)
    weights = tf.compat.v1.trainable_variables()
    grads = dict(zip(['images'] + [w.op.name for w in weights],
                     tf.gradients(loss, [images] + weights)))
    value = tf.stack([loss, magnitude])
    scales = ({} if uses is None else
              {n: uses.scales(n) for n in uses.names
               if uses.scales(n) is not None})
    session = tf.compat.v1.Session(graph=graph)
    session.run(tf.compat.v1.global_variables_initializer())

  def run(masks):
    feed = dict(zip(fed, masks))
    unused = [n for n, v in session.run(scales, feed).items() if not any(v)]
    # One run for the gradients expected live, one each for the others.
    loss_value, live = session.run(
        [value, {n: g for n, g in grads.items() if n not in unused}], feed)
    dead = []
    for name in unused:
      try:
        live[name] = session.run(grads[name], feed)
      except tf.errors.InvalidArgumentError as e:
        assert 'does not have value' in str(e)  # A dead tensor.
        dead.append(name)
    return loss_value, live, dead, unused
  return session, run


def _projected_loss(logits):
  """`sum(logits * projection)` and the sum of its terms' magnitudes."""
  terms = logits * tf.constant(
      np.random.default_rng(1).normal(size=(4, 5)).astype('f4'))
  return tf.reduce_sum(terms), tf.reduce_sum(tf.abs(terms))


def _validation_loss(spec, width_form):
  """A build no gradient is taken through (no conds), once: its session and
  a function of the masks returning [loss, magnitude]."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    fed = [tf.compat.v1.placeholder(tf.float32, [d.num_choices])
           for d in schema.decisions(spec)]
    logits = build_network(schema.with_masks(spec, fed),
                           tf.constant(_images(channels=3)), 5,
                           forms.validation(width_form))
    loss = tf.stack(_projected_loss(logits))
    session = tf.compat.v1.Session(graph=graph)
    session.run(tf.compat.v1.global_variables_initializer())
  return session, lambda masks: session.run(loss, dict(zip(fed, masks)))


@pytest.mark.parametrize('width_form', [widths.MASKED, widths.SAMPLED])
@pytest.mark.float_paths
def test_routed_switch_matches_functional_conds(width_form):
  # The v1 switch routes x and sums the active outputs with Switch/Merge
  # (one cond per choice); the functional If form nests conds. Same loss
  # and same gradients, zeros for every weight of an inactive choice (the
  # optimiser steps it), over masks with none, one and several choices on,
  # the kernel size nested inside the skippable layer.
  # Without conds (the deferred update's build), the same loss and live
  # gradients, and a dead gradient for exactly the weights whose every use
  # has op scale 0; and the same loss in a build for no gradients.
  # Each form is built once, and run on every draw's masks.
  spec = _tiny_spec()
  sessions, (v1, v2, no_conds, validation) = zip(
      _loss_and_gradients(spec, False, width_form),
      _loss_and_gradients(spec, True, width_form),
      _loss_and_gradients(spec, False, width_form, WeightUses()),
      _validation_loss(spec, width_form))
  rng = np.random.default_rng(0)
  seen_dead = 0
  seen_on = set()  # How many choices of an op decision were on.
  # First every choice on (distinct entries): the kernel size and the
  # squeeze-excite, switches without a base, sum a later active branch into
  # an earlier one, which the seeded draws below never ask of them.
  every_on = [np.eye(d.num_choices, dtype='f4')[0] if d.tag == schema.FILTERS
              else np.linspace(0.7, 1.3, d.num_choices).astype('f4')
              for d in schema.decisions(spec)]
  for masks in [every_on] + [_random_masks(spec, rng) for _ in range(6)]:
    seen_on.update(int(np.count_nonzero(m)) for m, d in
                   zip(masks, schema.decisions(spec)) if d.tag == schema.OP)
    loss_v1, grads_v1, _, _ = v1(masks)
    loss_v2, grads_v2, _, _ = v2(masks)
    loss_dead, grads_dead, dead, unused = no_conds(masks)
    # Each loss sums 20 terms `logits * projection` that can cancel, and
    # the builds differ in their last bits (the sampled form convolves
    # other channel counts than the functional one): 1e-4 of the terms'
    # magnitudes, the logits' tolerance of test_sampled_widths.py carried
    # through the sum (docs/testing.md, "Float tolerances").
    atol = 1e-4 * loss_v2[1]
    for other in (loss_v1, loss_dead, validation(masks)):
      np.testing.assert_allclose(other[0], loss_v2[0], rtol=0, atol=atol)
    assert sorted(grads_v1) == sorted(grads_v2)
    assert sorted(list(grads_dead) + dead) == sorted(grads_v2)
    assert sorted(dead) == sorted(unused)
    seen_dead += len(dead)
    for name, want in grads_v2.items():
      np.testing.assert_allclose(grads_v1[name], want, rtol=1e-4, atol=1e-5,
                                 err_msg=f'{name} with masks {masks}')
      if name in grads_dead:
        np.testing.assert_allclose(grads_dead[name], want, rtol=1e-4,
                                   atol=1e-5, err_msg=f'{name} {masks}')
  assert seen_dead  # The masks left some weights unused.
  assert seen_on == {0, 1, 2}  # None, one and several choices on.
  for session in sessions:
    session.close()


def _ops_run(fetch):
  """The names of the ops one traced run of `fetch` ran, in its own session.

  Step stats list the ops that ran; dead ones do not.
  """
  metadata = tf.compat.v1.RunMetadata()
  with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(fetch, options=tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                run_metadata=metadata)
  return [node.node_name for dev in metadata.step_stats.dev_stats
          for node in dev.node_stats]


def test_inactive_choices_add_no_tensor_to_the_input_gradient():
  # With one cond per choice capturing x, each inactive choice gave x's
  # gradient a zero tensor of x's size to sum: the backward pass grew with
  # the number of choices. Routed, a step runs as many sums for 4 choices
  # as for 1 (the graph has more, on paths that only op warm-up takes).
  def sums_run(num_choices):
    layer = Residual(OneOf([DepthwiseBottleneck(k, FilterMultiplier(3.0))
                            for k in (3, 5, 7, 3)[:num_choices]], schema.OP))
    spec = ConvTower((Block((Conv(3, strides=2), layer, layer), 8),))
    graph = tf.Graph()
    with graph.as_default():
      masks = [tf.compat.v1.placeholder_with_default(
          np.eye(d.num_choices, dtype='f4')[0], [d.num_choices])
               for d in schema.decisions(spec)]
      logits = build_network(schema.with_masks(spec, masks),
                             tf.constant(_images(channels=3)), 5,
                             forms.every_step('masked'))
      grads = tf.gradients(logits, tf.compat.v1.trainable_variables())
      total = tf.add_n([tf.reduce_sum(g) for g in grads])
      names = _ops_run(total)
    types = {op.name: op.type for op in graph.get_operations()}
    ran = [types.get(name) for name in names]
    assert 'Conv2DBackpropInput' in ran
    return ran.count('AddN')
  assert sums_run(4) == sums_run(1)


def test_an_unselected_choice_without_conds_runs_no_op_on_its_weights():
  # Its control edge from the routed input makes even the ops that read no
  # activation dead: here each weight's cast to bfloat16.
  spec = ConvTower((Block((OneOf((Conv(3), Conv(5)), schema.OP),), 8),))
  graph = tf.Graph()
  with graph.as_default():
    mask = tf.compat.v1.placeholder_with_default(
        np.array([1.0, 0.0], 'f4'), [2])
    logits = build_network(schema.with_masks(spec, [mask]),
                           tf.constant(_images()), 3,
                           forms.validation('masked'), dtype=tf.bfloat16)
    ran = set(_ops_run(logits))

  def weight_side(choice):
    """The ops reading choice's weights, and what reads those reads."""
    reads = [op for op in graph.get_operations() if op.type == 'ReadVariableOp'
             and f'/choices/{choice}/' in op.inputs[0].name]
    return reads + [c for r in reads for t in r.outputs for c in t.consumers()]

  casts = [op.name for op in weight_side(1) if op.type == 'Cast']
  assert casts and not ran & {op.name for op in weight_side(1)}
  assert ran & {op.name for op in weight_side(0) if op.type == 'Cast'}
