"""The two ProxylessNAS-based TuNAS spaces and the reference nets they contain.

Layout: docs/method.md section 3 and docs/cost_models.md Reference
architectures: docs/cost_models.md (op codes from the TuNAS model
archive; ProxylessNAS-Mobile from Cai et al. 2019, MobileNetV2 from Sandler
et al. 2018, MnasNet-B1 from Tan et al. 2019).
"""

from typing import List, Sequence, Tuple

from tunas_search import schema
from tunas_search.schema import OneOf
from tunas_search.specs import (Activation, Block, Conv, ConvTower,
                                DepthwiseBottleneck, DetectionEndpoint,
                                FilterMultiplier, GlobalAveragePool, Residual,
                                SeparableConv, Zero, scale_filters)

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


# Reference nets as 22 op codes (docs/cost_models.md): the block-1
# separable-conv kernel index, then one code per bottleneck where code j < 6
# is kernel KERNEL_SIZES[j % 3] with expansion EXPANSIONS[j // 3] and 6 = skip.
PROXYLESSNAS_MOBILE_CODES = (0, 1, 0, 6, 6, 2, 0, 1, 1, 5, 1, 1, 1, 4, 1, 1, 1,
                             5, 5, 2, 2, 5)
MOBILENET_V2_CODES = (0, 3, 3, 6, 6, 3, 3, 3, 6, 3, 3, 3, 3, 3, 3, 3, 6, 3, 3,
                      3, 6, 3)
MNASNET_B1_CODES = (0, 0, 0, 0, 6, 1, 1, 1, 6, 4, 4, 4, 6, 3, 3, 6, 6, 4, 4, 4,
                    4, 3)
MOBILENET_V2_FILTERS = (32, 16, 24, 32, 64, 96, 160, 320, 1280)
MNASNET_B1_FILTERS = (32, 16, 24, 40, 80, 96, 192, 320, 1280)
_SKIP_CODE = 6


def indices_from_codes(codes: Sequence[int],
                       filter_indices: Sequence[int]) -> Tuple[int, ...]:
  """Expands op codes and per-block width indices into 73 indices.

  Index order follows docs/cost_models.md: each bottleneck gives
  (kernel, expansion, op) and each block ends with its width index.
  """
  codes = list(codes)
  f = list(filter_indices)
  out: List[int] = [f[0], codes[0], f[1]]
  layer_codes = iter(codes[1:])
  for block, num_layers in zip(range(2, 8), (4, 4, 4, 4, 4, 1)):
    for _ in range(num_layers):
      code = next(layer_codes)
      if code == _SKIP_CODE:
        out += [0, 0, 1]  # Canonical 0 for the unused kernel and expansion.
      else:
        out += [code % 3, code // 3, 0]
    out.append(f[block])
  out.append(f[8])
  return tuple(out)


def enlarged_filter_indices(filters: Sequence[int]) -> Tuple[int, ...]:
  """Per-block index of each width in proxylessnas_enlarged_search."""
  return tuple(width_choices(b).index(f)
               for b, f in zip(ENLARGED_BASE_FILTERS, filters))


def proxylessnas_mobile_indices() -> Tuple[int, ...]:
  """ProxylessNAS-Mobile in proxylessnas_search."""
  return indices_from_codes(PROXYLESSNAS_MOBILE_CODES, [0] * 9)


def mobilenet_v2_indices() -> Tuple[int, ...]:
  """MobileNetV2 in proxylessnas_enlarged_search (docs/cost_models.md)."""
  return indices_from_codes(MOBILENET_V2_CODES,
                            enlarged_filter_indices(MOBILENET_V2_FILTERS))


def mnasnet_b1_indices() -> Tuple[int, ...]:
  """MnasNet-B1 in proxylessnas_enlarged_search (docs/cost_models.md)."""
  return indices_from_codes(MNASNET_B1_CODES,
                            enlarged_filter_indices(MNASNET_B1_FILTERS))
