"""Tests of the exact madds / params counts against hand and published numbers."""

import pytest

import search_spaces
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.cost_models import analytic
from tunas_search.space.schema import OP, OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      GlobalAveragePool, Residual,
                                      SeparableConv,
                                      UniversalInvertedBottleneck, Zero)

MADDS = cost_models.get('madds')
PARAMS = cost_models.get('params')


def _count(name: str, num_classes: int = 1000, image_size: int = 224):
  space = search_spaces.get(name)
  context = cost_models.CostContext(space.pixel1_model or name, image_size,
                                    num_classes)
  indices = space.default_indices()
  return (PARAMS.cost(space.spec(), indices, context),
          MADDS.cost(space.spec(), indices, context))


def _small_tower() -> ConvTower:
  return ConvTower((
      Block((Conv(3, strides=2), Activation('relu')), 8),
      Block((SeparableConv(3),), 16),
      Block((DepthwiseBottleneck(5, FilterMultiplier(3.0), True, strides=2),
             Residual(Zero())), 24),
      Block((Conv(1), GlobalAveragePool()), 32),
      Block((Conv(1, use_batch_norm=False),), 40),
  ))


def test_hand_computed_small_tower():
  # 33x33x3 input, 10 classes. Per layer (params; madds):
  #   conv3 s2 3->8, 17x17 (ceil(33/2)):   9*3*8+2*8 = 232;   216*289 = 62424
  #   sep3 8->16, 17x17:  72+16 + 128+32 = 248;           (72+128)*289 = 57800
  #   bneck k5 s2 16->(x3=48)->24, SE hidden make_divisible(12) = 16, 9x9:
  #     768+96 + 1200+96 + (768+16+768+48) + 1152+48 = 4960;
  #     768*289 + 1200*81 + 2*48*16 + 1152*81 = 414000
  #   conv1 24->32 at 9x9:  768+64 = 832;                       768*81 = 62208
  #   pool; conv1 32->40 with bias, no BN, at 1x1:  1280+40 = 1320;     1280
  #   classifier 40->10:  400+10 = 410;                                   400
  context = cost_models.CostContext('small', image_size=33, num_classes=10)
  assert PARAMS.cost(_small_tower(), [], context) == 8002
  assert MADDS.cost(_small_tower(), [], context) == 598112


def test_mobilenet_v2_matches_keras_and_paper():
  params, madds = _count('mobilenet_v2')
  # Trainable parameters of tf.keras.applications.MobileNetV2(weights=None,
  # classes=1000).
  assert params == 3_504_872
  # Sandler et al. 2018, Table 4: 300M multiply-adds. We count 300.77M.
  assert madds == 300_774_272
  assert abs(madds - 300e6) / 300e6 < 0.01


def test_mnasnet_b1_matches_published_counts():
  params, madds = _count('mnasnet_b1')
  # MnasNet-B1 1.0 (Tan et al. 2019, the no-SE model) is torchvision's
  # mnasnet1_0: its documentation lists num_params 4,383,312 and 0.31 GFLOPS
  # (multiply-adds, rounded to two digits: 305M..315M). We count 314.4M.
  assert params == 4_383_312
  assert madds == 314_415_872
  assert 305e6 <= madds <= 315e6


def test_proxylessnas_mobile_matches_published_counts():
  params, madds = _count('proxylessnas_mobile')
  # Cai et al. 2019 report 4.1M parameters for ProxylessNAS-Mobile; its
  # multiply-adds are usually quoted as 320M (Cai et al. 2020, Once-for-All,
  # Table 1). We count 4.08M (-0.5%) and 320.4M (+0.1%); both published
  # figures are rounded, hence the 1% tolerance.
  assert params == 4_080_512
  assert madds == 320_427_584
  assert abs(params - 4.1e6) / 4.1e6 < 0.01
  assert abs(madds - 320e6) / 320e6 < 0.01


def test_mobilenet_v3_large_matches_keras_and_paper():
  params, madds = _count('mobilenet_v3_large')
  # Trainable parameters of tf.keras.applications.MobileNetV3Large(
  # weights=None, classes=1000) are exactly 5,483,032 (Howard et al. 2019,
  # Table 3: 5.4M). Same architecture, so the widths, SE sizes and the
  # biased 960->1280 head conv are counted as Keras does.
  assert params == 5_483_032
  # Howard et al. 2019, Table 3: 219M. We count 216.6M (-1.1%). The paper
  # does not say what its count includes; 2.4M is about what element-wise
  # work (SE scaling, hard-swish multiplies) or an expand conv in the first
  # x1 bottleneck would add, neither of which is a convolution MAdd here.
  assert madds == 216_589_760
  assert abs(madds - 219e6) / 219e6 < 0.015


def test_num_classes_only_changes_the_classifier():
  params_1000, madds_1000 = _count('mobilenet_v2', num_classes=1000)
  params_1001, madds_1001 = _count('mobilenet_v2', num_classes=1001)
  # TuNAS's 1001-class ImageNet head adds one 1280-wide row and a bias.
  assert params_1001 - params_1000 == 1281
  assert madds_1001 - madds_1000 == 1280


def test_image_size_scales_convolutions():
  _, madds_224 = _count('mobilenet_v2', image_size=224)
  _, madds_448 = _count('mobilenet_v2', image_size=448)
  # Every conv runs on four times the pixels (448 halves evenly down to
  # 14x14); only the 1280x1000 classifier stays the same.
  assert madds_448 == 4 * (madds_224 - 1_280_000) + 1_280_000


def test_unknown_layer_type_is_a_clear_error():
  tower = ConvTower((Block(('not a layer',), 8),))
  with pytest.raises(TypeError, match='no madds/params rule for layer type '
                     'str'):
    PARAMS.cost(tower, [], cost_models.CostContext(None))


def test_applies_to_any_tower():
  assert PARAMS.applies(None, _small_tower())
  assert MADDS.applies('mobilenet_v3_large',
                       search_spaces.get('mobilenet_v3_large').spec())
  assert not MADDS.applies('x', Block((Conv(3),), 8))


_CONTEXT = cost_models.CostContext(None, image_size=8, num_classes=2,
                                   input_channels=1)


def _both(tower, indices=()):
  return (PARAMS.cost(tower, list(indices), _CONTEXT),
          MADDS.cost(tower, list(indices), _CONTEXT))


def test_layer_choice_weighs_every_choice_by_its_mask():
  # 8x8x1 input, 8 output channels, 2 classes. conv3: 72 + 16 params, 72 * 64
  # madds; conv5: 200 + 16, 200 * 64. Classifier: 8 * 2 + 2 = 18; 16 madds.
  tower = ConvTower((Block((OneOf((Conv(3), Conv(5)), OP),), 8),))
  assert _both(tower, [0]) == (88 + 18, 72 * 64 + 16)
  assert _both(tower, [1]) == (216 + 18, 200 * 64 + 16)


def test_choices_with_different_output_resolutions_are_refused():
  tower = ConvTower((Block((OneOf((Conv(3), Conv(3, strides=2)), OP),), 8),))
  with pytest.raises(ValueError) as error:
    _both(tower, [0])
  assert str(error.value) == (
      'the choices of (Conv(kernel_size=3, strides=1, use_batch_norm=True), '
      'Conv(kernel_size=3, strides=2, use_batch_norm=True)) give different '
      'output resolutions [4, 8]')


@pytest.mark.parametrize('strides', [2.0, True])
def test_strides_must_be_an_int(strides):
  tower = ConvTower((Block((Conv(3, strides=strides),), 8),))
  with pytest.raises(TypeError) as error:
    _both(tower)
  assert str(error.value) == f'strides must be an int, got {strides!r}'


def test_expansion_must_be_a_filter_multiplier():
  tower = ConvTower((Block((DepthwiseBottleneck(3, 6.0),), 8),))
  with pytest.raises(TypeError) as error:
    _both(tower)
  assert str(error.value) == ('expansion_filters must be a FilterMultiplier '
                              '(or a OneOf of them), got 6.0')


def test_only_conv_towers_are_counted():
  with pytest.raises(TypeError) as error:
    PARAMS.cost(Block((Conv(3),), 8), [], _CONTEXT)
  assert str(error.value) == 'madds/params need a ConvTower spec, got Block'


def test_expanded_widths_round_to_the_towers_filters_base():
  # 12 input channels x 1.5 = 18: a multiple of 2 stays 18; base 8 gives 16.
  def tower(base):
    return ConvTower((Block((Conv(1),), 12),
                      Block((DepthwiseBottleneck(1, FilterMultiplier(1.5)),),
                            12)), filters_base=base)
  # The bottleneck's params: expand 12e + BNs 4e + depthwise e + project 12e
  # + 24 (e = expanded width); everything else is the same in both towers.
  params_2, _ = _both(tower(2))
  params_8, _ = _both(tower(8))
  assert params_2 - params_8 == 29 * (18 - 16)


def test_nested_mixture_costs_are_weighted_and_summed():
  # Warm-up style masks (not one-hot) on the numpy path: the inner choice
  # costs 0.5 x 2 params (a 1x1 conv, 1 -> 1 channel, with bias) = 1.0, and
  # the outer choice must carry that 1.0 on, not drop it as a free choice.
  inner = OneOf((Conv(1, use_batch_norm=False), Zero()), OP)
  tower = ConvTower((Block((OneOf((inner, Zero()), OP),), 1),))
  masked = schema.with_masks(tower, [[0.5, 0.5], [1.0, 0.0]])
  context = cost_models.CostContext(None, image_size=1, num_classes=1,
                                    input_channels=1)
  params, madds = analytic.count(masked, context)
  # Layer: 1.0 params, 0.5 madds; classifier on the 1-wide block: 1 + 1
  # params, 1 madd.
  assert (params, madds) == (3.0, 1.5)


# Per-kind terms (the measured latency model's features) ---------------------

def _terms(masked_spec, context):
  terms = analytic.Terms()
  analytic.count(masked_spec, context, terms=terms)
  return {kind: [float(v) for v in values]
          for kind, values in terms.sums.items()}


def test_terms_of_the_hand_computed_small_tower():
  # The tower of test_hand_computed_small_tower (33x33x3, 10 classes); each
  # kind sums [madds, memory traffic, count], memory being the elements of a
  # layer's input, output and weights:
  #   conv3x3 s2 3->8, 33x33 -> 17x17: 216*289; 3*1089 + 8*289 + 216
  #   sep: depthwise3x3 on 8 at 17x17: 9*8*289; 8*(289 + 289 + 9)
  #        pointwise1x1 8->16 at 17x17: 128*289; (8 + 16)*289 + 128
  #   bneck 16->48->24, 17x17 -> 9x9: expand 768*289; (16 + 48)*289 + 768
  #        depthwise5x5 25*48*81; 48*(289 + 81 + 25)
  #        se (hidden 16): 2*48*16; 3*48*81 (pool, scale) + 1600 params
  #        project 1152*81; (48 + 24)*81 + 1152
  #   conv1x1 24->32 at 9x9 and 32->40 at 1x1: 768*81 + 1280;
  #        (24 + 32)*81 + 768 + (32 + 40) + 1280
  #   pool of 32 at 9x9: reads 32*81;  dense 40->10: 400; 40 + 10 + 400
  context = cost_models.CostContext('small', image_size=33, num_classes=10)
  assert _terms(_small_tower(), context) == {
      'conv3x3': [62424, 5795, 1],
      'depthwise3x3': [20808, 4696, 1],
      'pointwise1x1': [36992, 7064, 1],
      'expand1x1': [221952, 19264, 1],
      'depthwise5x5': [97200, 18960, 1],
      'se': [1536, 13264, 1],
      'project1x1': [93312, 6984, 1],
      'conv1x1': [63488, 6656, 2],
      'pool': [0, 2592, 1],
      'dense': [400, 450, 1],
  }
  # The madds terms add up to the madds count (598112, above).
  assert sum(v[0] for v in _terms(_small_tower(), context).values()) == 598112


def test_terms_are_weighted_by_the_masks():
  # 8x8x1 input, 2 classes. A layer choice at warm-up (0.5 each) between a
  # 3x3 and a 5x5 conv to 8 channels, then a bottleneck 8 -> 16 -> 8 whose
  # kernel (3 or 5) and squeeze-excite are searched.
  tower = ConvTower((
      Block((OneOf((Conv(3), Conv(5)), OP),), 8),
      Block((DepthwiseBottleneck(OneOf((3, 5), schema.OP),
                                 FilterMultiplier(2.0),
                                 OneOf((False, True), schema.OP)),), 8),
  ))
  masked = schema.with_masks(tower, [[0.5, 0.5], [0.25, 0.75], [0.0, 1.0]])
  got = _terms(masked, _CONTEXT)
  area = 64
  # Each conv counts half: [k*k*1*8*64, 1*64 + 8*64 + k*k*8, 1] / 2.
  assert got['conv3x3'] == [0.5 * 9 * 8 * area, 0.5 * (area + 8 * area + 72),
                            0.5]
  assert got['conv5x5'] == [0.5 * 25 * 8 * area,
                            0.5 * (area + 8 * area + 200), 0.5]
  # The kernel choice weighs each depthwise kind by its mask entry.
  assert got['depthwise3x3'] == [0.25 * 9 * 16 * area,
                                 0.25 * 16 * (area + area + 9), 0.25]
  assert got['depthwise5x5'] == [0.75 * 25 * 16 * area,
                                 0.75 * 16 * (area + area + 25), 0.75]
  # Squeeze-excite on (mask 1): hidden make_divisible(4) = 8.
  assert got['se'] == [2 * 16 * 8, 3 * 16 * area + 2 * 16 * 8 + 8 + 16, 1]
  assert got['expand1x1'] == [8 * 16 * area, (8 + 16) * area + 128, 1]
  assert got['project1x1'] == [16 * 8 * area, (16 + 8) * area + 128, 1]
  assert got['dense'] == [16, 8 + 2 + 16, 1]
  # Squeeze-excite off: its kind is there, at weight 0.
  off = schema.with_masks(tower, [[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]])
  assert _terms(off, _CONTEXT)['se'] == [0, 0, 0]


def test_without_terms_count_collects_nothing():
  terms = analytic._NoTerms()  # pylint: disable=protected-access
  context = cost_models.CostContext('small', image_size=33, num_classes=10)
  assert analytic.count(_small_tower(), context, terms=terms) == (
      analytic.count(_small_tower(), context))
  assert not terms.sums


def test_hand_computed_uib_with_searched_kernels():
  # 8x8x8 input, 2 classes; one UIB 8 -> (x2 = 16) -> 8 with stride 2 whose
  # start kernel is {none, 3, 5} at (0.5, 0.25, 0.25) and middle kernel
  # {3, 5} at (0, 1). Per part (params; madds; terms):
  #   start dw k on 8 at 8x8 (stride 1): k*k*8 + 16; k*k*8*64;
  #     memory 8*(64 + 64 + k*k)
  #   expand 8->16 at 8x8: 128 + 32; 128*64; (8 + 16)*64 + 128
  #   middle dw5 on 16 at 4x4: 400 + 32; 400*16; 16*(64 + 16 + 25)
  #   project 16->8 at 4x4: 128 + 16; 128*16; (16 + 8)*16 + 128
  #   classifier 8->2: 18; 16
  tower = ConvTower((Block((UniversalInvertedBottleneck(
      OneOf((0, 3, 5), OP), OneOf((3, 5), OP), FilterMultiplier(2.0),
      strides=2),), 8),))
  masked = schema.with_masks(tower, [[0.5, 0.25, 0.25], [0.0, 1.0]])
  context = cost_models.CostContext('uib', image_size=8, num_classes=2,
                                    input_channels=8)
  start_params = 0.25 * (72 + 16) + 0.25 * (200 + 16)
  start_madds = 0.25 * 72 * 64 + 0.25 * 200 * 64
  assert analytic.count(masked, context) == pytest.approx((
      start_params + 160 + 432 + 144 + 18,
      start_madds + 8192 + 6400 + 2048 + 16))
  got = _terms(masked, context)
  assert got['depthwise3x3'] == [0.25 * 72 * 64, 0.25 * 8 * (128 + 9), 0.25]
  assert got['depthwise5x5'] == pytest.approx([
      0.25 * 200 * 64 + 6400, 0.25 * 8 * (128 + 25) + 16 * 105, 1.25])
  assert got['expand1x1'] == [8192, 24 * 64 + 128, 1]
  assert got['project1x1'] == [2048, 24 * 16 + 128, 1]
  # The FFN instantiation (no depthwise conv) of the same block, stride 1.
  ffn = ConvTower((Block((UniversalInvertedBottleneck(
      0, 0, FilterMultiplier(2.0)),), 8),))
  assert analytic.count(ffn, context) == (160 + 144 + 18,
                                          8192 + 128 * 64 + 16)


def test_hand_computed_strided_uib_without_a_middle_depthwise_conv():
  # The ConvNext-like block of the test above, stride 2: its start DW
  # carries the stride (timm's rule), so the expansion runs at 4x4.
  #   start dw5 on 8, 8x8 -> 4x4: 200 + 16; 200*16; memory 8*(64 + 16 + 25)
  #   expand 8->16 at 4x4: 128 + 32; 128*16; (8 + 16)*16 + 128
  #   project 16->8 at 4x4: 128 + 16; 128*16; (16 + 8)*16 + 128
  #   classifier 8->2: 18; 16
  context = cost_models.CostContext('uib', image_size=8, num_classes=2,
                                    input_channels=8)
  tower = ConvTower((Block((UniversalInvertedBottleneck(
      5, 0, FilterMultiplier(2.0), strides=2),), 8),))
  assert analytic.count(tower, context) == (216 + 160 + 144 + 18,
                                            3200 + 2048 + 2048 + 16)
  got = _terms(tower, context)
  assert got['depthwise5x5'] == [3200, 8 * 105, 1]
  assert got['expand1x1'] == [2048, 24 * 16 + 128, 1]
  # Searched as the two strided ConvNext-like blocks at (0.75, 0.25): each
  # term weighted by its kernel's mask entry.
  searched = schema.with_masks(ConvTower((Block((UniversalInvertedBottleneck(
      OneOf((3, 5), OP), 0, FilterMultiplier(2.0), strides=2),), 8),)),
                               [[0.75, 0.25]])
  assert analytic.count(searched, context) == pytest.approx((
      0.75 * 88 + 0.25 * 216 + 160 + 144 + 18,
      0.75 * 72 * 16 + 0.25 * 3200 + 2048 + 2048 + 16))
