"""The two ProxylessNAS-based TuNAS spaces and the reference nets they contain.

Layout: docs/method.md section 3 (and the index layout of
docs/cost_models.md). Reference architectures: the published op codes of
docs/method.md section 3, written as block strings (ProxylessNAS-Mobile from
Cai et al. 2019, MobileNetV2 from Sandler et al. 2018, MnasNet-B1 from Tan et
al. 2019).
"""

from typing import Sequence, Tuple

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, DetectionEndpoint,
                                      FilterMultiplier, GlobalAveragePool,
                                      Residual, SeparableConv, Zero,
                                      scale_filters)

# Width multipliers of the enlarged space (docs/method.md section 3).
WIDTH_MULTIPLIERS = (0.5, 0.625, 0.75, 1.0, 1.25, 1.5, 2.0)
# ProxylessNAS-Mobile's widths, stem to head: the fixed widths of
# proxylessnas_search.
PROXYLESSNAS_MOBILE_FILTERS = (32, 16, 32, 40, 80, 96, 192, 320, 1280)
# Base widths of proxylessnas_enlarged_search, stem to head.
ENLARGED_BASE_FILTERS = (16, 16, 16, 32, 64, 128, 256, 512, 1024)
KERNEL_SIZES = (3, 5, 7)
EXPANSIONS = (3.0, 6.0)


def width_choices(base: int, multipliers: Sequence[float] = WIDTH_MULTIPLIERS):
  """Sorted, de-duplicated `scale_filters(base, m)` (docs/cost_models.md)."""
  return tuple(sorted({scale_filters(base, m) for m in multipliers}))


def bneck(strides: int) -> OneOf:
  """The collapsed bottleneck op: one bottleneck with searched kernel and
  expansion, as a single-choice op decision (docs/cost_models.md)."""
  return OneOf([DepthwiseBottleneck(
      kernel_size=OneOf(KERNEL_SIZES, schema.OP),
      expansion_filters=OneOf([FilterMultiplier(e) for e in EXPANSIONS],
                              schema.FILTERS),
      strides=strides, activation='relu')], schema.OP)


def skippable_bneck() -> Residual:
  """A residual bottleneck that the search may replace by Zero (skip)."""
  inner = bneck(strides=1)
  return Residual(OneOf(inner.choices + (Zero(),), schema.OP))


def stage(filters, strides: int, endpoint: bool = True) -> Block:
  """One bottleneck stage: a fixed first layer, then three optional ones."""
  layers = [bneck(strides)] + [skippable_bneck() for _ in range(3)]
  if endpoint:
    layers.append(DetectionEndpoint())
  return Block(tuple(layers), filters)


def proxylessnas_tower(filters: Sequence[OneOf]) -> ConvTower:
  """The ProxylessNAS layout with the given per-block width decisions."""
  f = list(filters)
  return ConvTower((
      # Stem
      Block((Conv(3, strides=2), Activation('relu')), f[0]),
      Block((OneOf([SeparableConv(k, strides=1, activation='relu')
                    for k in KERNEL_SIZES], schema.OP),
             DetectionEndpoint()), f[1]),
      # Body: 112 -> 56 -> 28 -> 14 -> 14 -> 7 -> 7 at 224x224.
      stage(f[2], strides=2),
      stage(f[3], strides=2),
      stage(f[4], strides=2, endpoint=False),
      stage(f[5], strides=1),
      stage(f[6], strides=2),
      Block((bneck(strides=1), DetectionEndpoint()), f[7]),
      # Head
      Block((Conv(1), Activation('relu'), GlobalAveragePool()), f[8]),
  ))


def proxylessnas_search() -> ConvTower:
  """~10^21 architectures; widths fixed to ProxylessNAS-Mobile's."""
  return proxylessnas_tower(
      [OneOf([f], schema.FILTERS) for f in PROXYLESSNAS_MOBILE_FILTERS])


def proxylessnas_enlarged_search() -> ConvTower:
  """~10^28 architectures: proxylessnas_search plus one width per block."""
  return proxylessnas_tower(
      [OneOf(width_choices(b), schema.FILTERS) for b in ENLARGED_BASE_FILTERS])


# Reference nets as block strings (architecture.block_string's notation): per
# block `filters: layer, ...`; `ib_k5_e3_s2_relu` is an inverted bottleneck
# with kernel 5, expansion x3, stride 2 and ReLU, `+` a residual layer and
# `skip` a skipped one. They are the published op codes of
# docs/method.md section 3 (kernel and expansion per bottleneck, 6 = skip).
PROXYLESSNAS_MOBILE = ' | '.join((  # Cai et al. 2019.
    '32: conv3_s2, relu',
    '16: sep3_relu, endpoint',
    '32: ib_k5_e3_s2_relu, +ib_k3_e3_relu, +skip, +skip, endpoint',
    '40: ib_k7_e3_s2_relu, +ib_k3_e3_relu, +ib_k5_e3_relu, +ib_k5_e3_relu, '
    'endpoint',
    '80: ib_k7_e6_s2_relu, +ib_k5_e3_relu, +ib_k5_e3_relu, +ib_k5_e3_relu',
    '96: ib_k5_e6_relu, +ib_k5_e3_relu, +ib_k5_e3_relu, +ib_k5_e3_relu, '
    'endpoint',
    '192: ib_k7_e6_s2_relu, +ib_k7_e6_relu, +ib_k7_e3_relu, +ib_k7_e3_relu, '
    'endpoint',
    '320: ib_k7_e6_relu, endpoint',
    '1280: conv1, relu, gap'))
MOBILENET_V2 = ' | '.join((  # Sandler et al. 2018, width multiplier 1.0.
    '32: conv3_s2, relu',
    '16: sep3_relu, endpoint',
    '24: ib_k3_e6_s2_relu, +ib_k3_e6_relu, +skip, +skip, endpoint',
    '32: ib_k3_e6_s2_relu, +ib_k3_e6_relu, +ib_k3_e6_relu, +skip, endpoint',
    '64: ib_k3_e6_s2_relu, +ib_k3_e6_relu, +ib_k3_e6_relu, +ib_k3_e6_relu',
    '96: ib_k3_e6_relu, +ib_k3_e6_relu, +ib_k3_e6_relu, +skip, endpoint',
    '160: ib_k3_e6_s2_relu, +ib_k3_e6_relu, +ib_k3_e6_relu, +skip, endpoint',
    '320: ib_k3_e6_relu, endpoint',
    '1280: conv1, relu, gap'))
MNASNET_B1 = ' | '.join((  # Tan et al. 2019.
    '32: conv3_s2, relu',
    '16: sep3_relu, endpoint',
    '24: ib_k3_e3_s2_relu, +ib_k3_e3_relu, +ib_k3_e3_relu, +skip, endpoint',
    '40: ib_k5_e3_s2_relu, +ib_k5_e3_relu, +ib_k5_e3_relu, +skip, endpoint',
    '80: ib_k5_e6_s2_relu, +ib_k5_e6_relu, +ib_k5_e6_relu, +skip',
    '96: ib_k3_e6_relu, +ib_k3_e6_relu, +skip, +skip, endpoint',
    '192: ib_k5_e6_s2_relu, +ib_k5_e6_relu, +ib_k5_e6_relu, +ib_k5_e6_relu, '
    'endpoint',
    '320: ib_k3_e6_relu, endpoint',
    '1280: conv1, relu, gap'))


def _reference(space: ConvTower, block_string: str) -> Tuple[int, ...]:
  """The architecture of a reference net (a block string) in `space`."""
  return tuple(architecture.indices_of(
      space, architecture.parse_block_string(block_string)))


def proxylessnas_mobile_indices() -> Tuple[int, ...]:
  """ProxylessNAS-Mobile in proxylessnas_search."""
  return _reference(proxylessnas_search(), PROXYLESSNAS_MOBILE)


def mobilenet_v2_indices() -> Tuple[int, ...]:
  """MobileNetV2 in proxylessnas_enlarged_search (its widths differ from
  ProxylessNAS-Mobile's)."""
  return _reference(proxylessnas_enlarged_search(), MOBILENET_V2)


def mnasnet_b1_indices() -> Tuple[int, ...]:
  """MnasNet-B1 in proxylessnas_enlarged_search."""
  return _reference(proxylessnas_enlarged_search(), MNASNET_B1)
