"""The UIB block: layer order, norms and activations, and its weight sharing."""

import itertools
import re

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Block, Conv, ConvTower, FilterMultiplier,
                                      Residual, UniversalInvertedBottleneck,
                                      Zero)
from tunas_search.supernet import WeightUses
from tunas_search.supernet import build_network
from tunas_search.supernet import builder
from tunas_search.supernet import forms
from tunas_search.supernet import ops
from tunas_search.supernet import widths

EPSILON = ops.BN_EPSILON
CIN = 8


def _uib(start, middle, strides=1, expansion=2.0):
  return UniversalInvertedBottleneck(start, middle,
                                     FilterMultiplier(expansion), strides)


# NumPy reference, written from docs/mobilenet_v4.md's layer order.
def _depthwise(x, kernel, stride):
  """SAME depthwise conv (TensorFlow's padding: the extra pixel after)."""
  n, h, w, c = x.shape
  k = kernel.shape[0]
  out = -(-h // stride)
  pad = max((out - 1) * stride + k - h, 0)
  x = np.pad(x, [(0, 0), (pad // 2, pad - pad // 2),
                 (pad // 2, pad - pad // 2), (0, 0)])
  y = np.zeros((n, out, out, c))
  for i, j in itertools.product(range(k), range(k)):
    y += (x[:, i:i + (out - 1) * stride + 1:stride,
            j:j + (out - 1) * stride + 1:stride, :] * kernel[i, j, :, 0])
  return y


def _bn(x, values, scope):
  """Batch normalisation with the batch's statistics (search mode)."""
  mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
  return ((x - mean) / np.sqrt(var + EPSILON) * values[f'{scope}/gamma']
          + values[f'{scope}/beta'])


def _reference(x, values, start, middle, strides):
  # The middle depthwise conv carries the stride, else the start one (timm).
  start_strides = 1 if middle else strides
  if start:
    x = _bn(_depthwise(x, values[f'uib/start_depthwise_k{start}/kernel'],
                       start_strides),
            values, f'uib/start_depthwise_bn_k{start}')  # No activation.
  h = np.maximum(_bn(np.einsum('nhwc,cd->nhwd', x,
                               values['uib/expand/kernel'][0, 0]),
                     values, 'uib/expand_bn'), 0)
  if middle:
    h = np.maximum(_bn(_depthwise(h, values[f'uib/depthwise_k{middle}/kernel'],
                                  strides),
                       values, f'uib/depthwise_bn_k{middle}'), 0)
  return _bn(np.einsum('nhwc,cd->nhwd', h, values['uib/project/kernel'][0, 0]),
             values, 'uib/project_bn')  # No activation.


def _context():
  return ops.BuildContext(True, 'batch', tf.float32)


def _randomize(session, rng):
  """Random values for every variable (BN gamma and beta included)."""
  variables = tf.compat.v1.global_variables()
  for v in variables:
    v.load(rng.normal(0.5, 0.5, v.shape.as_list()).astype(np.float32),
           session)
  return {v.op.name: v for v in variables}


@pytest.mark.parametrize('start, middle, strides, cout', [
    (3, 5, 1, CIN),   # ExtraDW
    (5, 3, 2, 16),    # ExtraDW with a stride
    (0, 3, 2, 16),    # IB
    (3, 0, 1, CIN),   # ConvNext-like
    (5, 0, 2, 16),    # ConvNext-like with a stride: on the start DW
    (0, 0, 1, 16),    # FFN
])
@pytest.mark.float_paths
def test_a_uib_computes_the_published_layers(start, middle, strides, cout):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(4, 9, 9, CIN)).astype(np.float32)
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    built = builder.build_layer(_uib(start, middle, strides), 'uib',
                                widths.fixed(CIN), widths.fixed(cout),
                                _context())
    y = built.apply(tf.constant(x))
    variables = _randomize(session, rng)
    got, values = session.run([y, variables])
  assert built.strides == strides
  assert got.shape == (4, -(-9 // strides), -(-9 // strides), cout)
  np.testing.assert_allclose(
      got, _reference(x, values, start, middle, strides), atol=2e-4)
  # No biases; depthwise convs only where asked for.
  kinds = {name.split('/')[1] for name in values}
  assert kinds == {'expand', 'expand_bn', 'project', 'project_bn'} | (
      {f'start_depthwise_k{start}', f'start_depthwise_bn_k{start}'}
      if start else set()) | ({f'depthwise_k{middle}',
                              f'depthwise_bn_k{middle}'} if middle else set())


def _family(strides=1, start=(0, 3, 5), middle=(0, 3, 5)):
  return _uib(OneOf(start, schema.OP), OneOf(middle, schema.OP), strides)


def _searched_uib(strides=1):
  """mobilenet_v4's searched block, with this test's expansion."""
  if strides == 1:
    return _family()
  return OneOf((_family(strides, middle=(3, 5)),
                _family(strides, start=(3, 5), middle=(0,))), schema.OP)


def _kernels(prefix, start, middle):
  return ([f'{prefix}/start_depthwise_k{k}/kernel' for k in start]
          + [f'{prefix}/depthwise_k{k}/kernel' for k in middle])


@pytest.mark.parametrize('strides, kernels', [
    # Every instantiation shares one expand and one project conv.
    (1, ['uib/expand/kernel', 'uib/project/kernel']
     + _kernels('uib', (3, 5), (3, 5))),
    # Two op choices: with a middle DW (6) and the ConvNext-like (2), whose
    # 1x1 expansions run at different resolutions.
    (2, [f'uib/choices/{i}/{conv}/kernel' for i in (0, 1)
         for conv in ('expand', 'project')]
     + _kernels('uib/choices/0', (3, 5), (3, 5))
     + _kernels('uib/choices/1', (3, 5), ())),
])
def test_the_supernet_shares_the_1x1_convs_and_runs_the_sampled_block(
    strides, kernels):
  rng = np.random.default_rng(1)
  x = rng.normal(size=(4, 8, 8, CIN)).astype(np.float32)
  layer = _searched_uib(strides)
  sizes = [d.num_choices for d in schema.decisions(layer)]
  combos = list(itertools.product(*[range(n) for n in sizes]))
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    masks = [tf.compat.v1.placeholder(tf.float32, [n]) for n in sizes]
    searched = schema.with_masks(layer, masks)
    ctx = _context()
    supernet = builder.build_layer(searched, 'uib', widths.fixed(CIN),
                                   widths.fixed(CIN), ctx).apply(tf.constant(x))
    before = len(tf.compat.v1.global_variables())
    alone = [builder.build_layer(
        architecture.with_indices(layer, list(c)), 'uib', widths.fixed(CIN),
        widths.fixed(CIN), ctx).apply(tf.constant(x)) for c in combos]
    # The stand-alone blocks reuse the supernet's variables.
    assert len(tf.compat.v1.global_variables()) == before
    names = sorted(v.op.name for v in tf.compat.v1.global_variables()
                   if v.op.name.endswith('/kernel'))
    assert names == sorted(kernels)
    _randomize(session, rng)
    for c, want in zip(combos, alone):
      feed = {m: np.eye(m.shape[0], dtype=np.float32)[i]
              for m, i in zip(masks, c)}
      got, expected = session.run([supernet, want], feed)
      np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=str(c))


def test_a_strided_block_has_eight_instantiations():
  # Nine pairs of kernels but the strided FFN, which has no conv to stride.
  layer = _searched_uib(strides=2)
  pruned = {architecture.prune(layer, list(c)) for c in itertools.product(
      *[range(d.num_choices) for d in schema.decisions(layer)])}
  pairs = {(u.start_kernel_size, u.middle_kernel_size) for u in pruned}
  assert len(pruned) == len(pairs) == 8
  assert pairs == set(itertools.product((0, 3, 5), (0, 3, 5))) - {(0, 0)}
  assert {u.stride_on_start for u in pruned if u.middle_kernel_size == 0} == {
      True}


@pytest.mark.parametrize('start, middle, message', [
    # A strided FFN: no depthwise conv to carry the stride.
    (0, 0, 'a UIB with stride 2 and no middle depthwise conv strides its '
     'start depthwise conv; start_kernel_size 0 may be 0 (none), a strided '
     'FFN'),
    (OneOf((0, 3), schema.OP), 0, 'start_kernel_size OneOf(choices=(0, 3), '
     "tag='op') may be 0 (none), a strided FFN"),
    # Which conv strides may not depend on a choice.
    (3, OneOf((0, 3), schema.OP), 'a UIB with stride 2 strides its middle '
     'depthwise conv, or its start one when it has no middle one, so the '
     'middle kernel may not be searched between 0 (none) and a size'),
])
def test_a_strided_uib_needs_a_depthwise_conv_that_always_strides(
    start, middle, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    UniversalInvertedBottleneck(start, middle, FilterMultiplier(4.0),
                                strides=2)


def test_a_deferred_build_of_uib_choices_uses_each_weight_once():
  # The deferred update needs each weight of a choice used by that choice
  # alone (builder._check_dead_gradients): the depthwise kernels are inside
  # the kernel choices, the shared 1x1 convs outside them, and the two
  # kinds of strided block are two op choices with a 1x1 expansion each.
  tower = ConvTower((
      Block((Conv(3, strides=2), _searched_uib(strides=2), _searched_uib(),
             Residual(OneOf((_searched_uib(), Zero()), schema.OP))),
            OneOf((8, 16), schema.FILTERS)),))
  decisions = schema.decisions(tower)
  with tf.Graph().as_default():
    masks = [tf.constant(np.eye(d.num_choices, dtype=np.float32)[0])
             for d in decisions]
    uses = WeightUses()
    logits = build_network(schema.with_masks(tower, masks),
                           tf.zeros([2, 16, 16, 3]), 5,
                           forms.deferred(widths.SAMPLED), uses=uses)
  assert logits.shape.as_list() == [2, 5]
  once = set(uses.used_once())
  assert {'blocks/0/layers/3/layer/choices/0/start_depthwise_k5/kernel',
          'blocks/0/layers/1/choices/0/expand/kernel',
          'blocks/0/layers/1/choices/1/expand/kernel',
          'blocks/0/layers/1/choices/1/start_depthwise_k3/kernel'} <= once
  assert 'blocks/0/layers/2/expand/kernel' not in once  # Outside a choice.
  assert uses.scales('blocks/0/layers/2/expand/kernel') is None
