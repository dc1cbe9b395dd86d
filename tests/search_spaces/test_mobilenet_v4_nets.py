"""MobileNetV4-Conv-S/M/L: parameter and MAdds counts against the layer tables.

The expected counts are computed here by hand from the published layer
tables (docs/mobilenet_v4.md, Qin et al. 2024 appendix; the same rows as
TensorFlow Model Garden's and timm's networks), without the builder or the
cost models: every conv and depthwise kernel, BN gamma and beta after every
conv, no conv biases, and the classifier's kernel and bias.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from bin import describe_arch
from tunas_search.space import architecture
from tunas_search.supernet import build_network
from tunas_search.supernet import forms

# Rows: ('conv', k, stride, out) for a conv -> BN (-> ReLU), or
# ('uib', start k, middle k, expansion, out, stride, repeats) with kernel 0
# for an absent depthwise conv (the tables' '-').
SMALL = (224, 3, [
    ('conv', 3, 2, 32),
    ('conv', 3, 2, 32), ('conv', 1, 1, 32),
    ('conv', 3, 2, 96), ('conv', 1, 1, 64),
    ('uib', 5, 5, 3, 96, 2, 1),
    ('uib', 0, 3, 2, 96, 1, 4),
    ('uib', 3, 0, 4, 96, 1, 1),
    ('uib', 3, 3, 6, 128, 2, 1),
    ('uib', 5, 5, 4, 128, 1, 1),
    ('uib', 0, 5, 4, 128, 1, 1),
    ('uib', 0, 5, 3, 128, 1, 1),
    ('uib', 0, 3, 4, 128, 1, 2),
])
MEDIUM = (256, 3, [
    ('conv', 3, 2, 32),
    ('conv', 3, 2, 128), ('conv', 1, 1, 48),  # FusedIB 3x3, x4.
    ('uib', 3, 5, 4, 80, 2, 1),
    ('uib', 3, 3, 2, 80, 1, 1),
    ('uib', 3, 5, 6, 160, 2, 1),
    ('uib', 3, 3, 4, 160, 1, 2),
    ('uib', 3, 5, 4, 160, 1, 1),
    ('uib', 3, 3, 4, 160, 1, 1),
    ('uib', 3, 0, 4, 160, 1, 1),
    ('uib', 0, 0, 2, 160, 1, 1),
    ('uib', 3, 0, 4, 160, 1, 1),
    ('uib', 5, 5, 6, 256, 2, 1),
    ('uib', 5, 5, 4, 256, 1, 1),
    ('uib', 3, 5, 4, 256, 1, 2),
    ('uib', 0, 0, 4, 256, 1, 1),
    ('uib', 3, 0, 4, 256, 1, 1),
    ('uib', 3, 5, 2, 256, 1, 1),
    ('uib', 5, 5, 4, 256, 1, 1),
    ('uib', 0, 0, 4, 256, 1, 2),
    ('uib', 5, 0, 2, 256, 1, 1),
])
LARGE = (384, 3, [
    ('conv', 3, 2, 24),
    ('conv', 3, 2, 96), ('conv', 1, 1, 48),  # FusedIB 3x3, x4.
    ('uib', 3, 5, 4, 96, 2, 1),
    ('uib', 3, 3, 4, 96, 1, 1),
    ('uib', 3, 5, 4, 192, 2, 1),
    ('uib', 3, 3, 4, 192, 1, 3),
    ('uib', 3, 5, 4, 192, 1, 1),
    ('uib', 5, 3, 4, 192, 1, 5),
    ('uib', 3, 0, 4, 192, 1, 1),
    ('uib', 5, 5, 4, 512, 2, 1),
    ('uib', 5, 5, 4, 512, 1, 3),
    ('uib', 5, 0, 4, 512, 1, 1),
    ('uib', 5, 3, 4, 512, 1, 1),
    ('uib', 5, 0, 4, 512, 1, 2),
    ('uib', 5, 3, 4, 512, 1, 1),
    ('uib', 5, 5, 4, 512, 1, 1),
    ('uib', 5, 0, 4, 512, 1, 3),
])
NETS = {'mobilenet_v4_conv_small': SMALL, 'mobilenet_v4_conv_medium': MEDIUM,
        'mobilenet_v4_conv_large': LARGE}
# timm's published parameter counts (1000 classes), in millions.
TIMM_PARAMS_M = {'mobilenet_v4_conv_small': 3.77,
                 'mobilenet_v4_conv_medium': 9.72,
                 'mobilenet_v4_conv_large': 32.59}


def _by_hand(table, num_classes):
  """(params, madds) of a layer table, head and classifier included."""
  side, channels, rows = table
  params = madds = 0
  for row in rows:
    if row[0] == 'conv':
      _, k, stride, out = row
      side = math.ceil(side / stride)
      params += k * k * channels * out + 2 * out
      madds += k * k * channels * out * side * side
      channels = out
      continue
    _, start, middle, expansion, out, stride, repeats = row
    for _ in range(repeats):
      expanded = channels * expansion
      if start:  # Stride 1, before the expansion.
        params += start * start * channels + 2 * channels
        madds += start * start * channels * side * side
      params += channels * expanded + 2 * expanded
      madds += channels * expanded * side * side
      side = math.ceil(side / stride)
      if middle:  # Carries the stride.
        params += middle * middle * expanded + 2 * expanded
        madds += middle * middle * expanded * side * side
      params += expanded * out + 2 * out
      madds += expanded * out * side * side
      channels, stride = out, 1
  # Head: 1x1 to 960 (BN), pool, 1x1 960 -> 1280 (BN, no bias), classifier.
  params += channels * 960 + 2 * 960 + 960 * 1280 + 2 * 1280
  madds += channels * 960 * side * side + 960 * 1280
  return (params + 1280 * num_classes + num_classes,
          madds + 1280 * num_classes)


@pytest.mark.parametrize('name', sorted(NETS))
@pytest.mark.parametrize('num_classes', [1000, 1001])
def test_describe_counts_match_the_layer_tables(name, num_classes):
  info = describe_arch.describe(name, num_classes=num_classes)
  side = NETS[name][0]
  assert info['image_size'] == side  # The published resolution.
  assert (info['params'], info['madds']) == _by_hand(NETS[name], num_classes)


@pytest.mark.parametrize('name', sorted(NETS))
def test_parameters_match_timm(name):
  params, _ = _by_hand(NETS[name], 1000)
  assert round(params / 1e6, 2) == TIMM_PARAMS_M[name]


def test_the_hand_counts_are_the_published_figures():
  # The numbers docs/mobilenet_v4.md quotes.
  assert _by_hand(SMALL, 1000) == (3_774_024, 186_005_568)
  assert _by_hand(MEDIUM, 1000) == (9_715_512, 1_080_244_224)
  assert _by_hand(LARGE, 1000) == (32_590_864, 6_376_220_672)


@pytest.mark.parametrize('name', [
    'mobilenet_v4_conv_small',
    # ~10 s to build; the cost-model counts above cover it.
    pytest.param('mobilenet_v4_conv_large', marks=pytest.mark.slow)])
def test_the_built_network_has_the_counted_parameters(name):
  space = search_spaces.get(name)
  side = NETS[name][0]
  with tf.Graph().as_default():
    spec = architecture.with_indices(space.spec(), space.default_indices())
    images = tf.compat.v1.placeholder(tf.float32, [1, side, side, 3])
    logits = build_network(spec, images, 1001,
                           forms.standalone(is_training=False))
    count = sum(int(np.prod(v.shape))
                for v in tf.compat.v1.trainable_variables())
    biases = [v.op.name for v in tf.compat.v1.trainable_variables()
              if v.op.name.endswith('/bias')]
  assert logits.shape.as_list() == [1, 1001]
  assert count == _by_hand(NETS[name], 1001)[0]
  assert biases == ['classifier/bias']  # No conv has a bias.


@pytest.mark.parametrize('name', sorted(NETS))
def test_every_block_that_keeps_its_shape_is_residual(name):
  # docs/mobilenet_v4.md: a UIB adds its input iff stride 1 and C_in = C_out.
  tower = architecture.parse_block_string(
      architecture.block_string(architecture.prune(
          search_spaces.get(name).spec(),
          search_spaces.get(name).default_indices())))
  width = 3
  for block in tower.blocks:
    for layer in block.layers:
      inner = getattr(layer, 'layer', layer)
      if hasattr(inner, 'middle_kernel_size'):
        keeps = inner.strides == 1 and width == block.filters
        assert keeps == (layer is not inner), (block.filters, layer)
      if hasattr(inner, 'strides'):
        width = block.filters
