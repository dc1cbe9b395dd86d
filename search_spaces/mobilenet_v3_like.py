"""The MobileNetV3-like TuNAS space and MobileNetV3-Large in the same family.

Layout: docs/method.md section 3 and docs/cost_models.md MobileNetV3-Large:
Howard et al. 2019, Table 1, encoded as in docs/cost_models.md but with
its exact widths (112, 960) and expansions (x2.5, x2.3) as fixed choices.
"""

from typing import Sequence

from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, DetectionEndpoint,
                                      FilterMultiplier, GlobalAveragePool,
                                      Residual, SeparableConv, Zero)
from search_spaces.proxylessnas import width_choices

# Stem, five stages, two head convs (docs/method.md section 3).
BASE_FILTERS = (16, 16, 32, 64, 128, 256, 512, 1024)
STAGE_STRIDES = (2, 2, 2, 1, 2)
STAGE_ACTIVATIONS = ('relu', 'relu', 'swish6', 'swish6', 'swish6')
STAGE_ENDPOINTS = (True, True, False, True, True)
KERNEL_SIZES = (3, 5, 7)
EXPANSIONS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)


def op(*choices) -> OneOf:
  return OneOf(choices, schema.OP)


def widths(*choices) -> OneOf:
  return OneOf(choices, schema.FILTERS)


def bneck(kernel: OneOf, expansion: OneOf, se: OneOf, strides: int,
          activation: str) -> DepthwiseBottleneck:
  return DepthwiseBottleneck(kernel_size=kernel, expansion_filters=expansion,
                             use_squeeze_and_excite=se, strides=strides,
                             activation=activation)


def optional(layer, present: bool = True, absent: bool = True) -> Residual:
  """A residual layer the search may skip: OneOf[layer, Zero]."""
  choices = ([layer] if present else []) + ([Zero()] if absent else [])
  return Residual(op(*choices))


def searched_bneck(strides: int, activation: str) -> DepthwiseBottleneck:
  return bneck(op(*KERNEL_SIZES),
               widths(*[FilterMultiplier(e) for e in EXPANSIONS]),
               op(False, True), strides, activation)


def stage(filters: OneOf, strides: int, activation: str,
          endpoint: bool) -> Block:
  layers = [searched_bneck(strides, activation)]
  layers += [optional(searched_bneck(1, activation)) for _ in range(3)]
  if endpoint:
    layers.append(DetectionEndpoint())
  return Block(tuple(layers), filters)


def mobilenet_v3_like_search() -> ConvTower:
  """~10^43 architectures (86 decisions)."""
  f = [widths(*width_choices(b)) for b in BASE_FILTERS]
  return ConvTower((
      # Stem
      Block((Conv(op(3, 5), strides=2), Activation('swish6'),
             optional(SeparableConv(op(*KERNEL_SIZES), 1, 'relu')),
             DetectionEndpoint()), f[0]),
      # Body
      *[stage(f[1 + i], STAGE_STRIDES[i], STAGE_ACTIVATIONS[i],
              STAGE_ENDPOINTS[i]) for i in range(5)],
      # Head: the second 1x1 conv runs on pooled features, with a bias.
      Block((Conv(1), Activation('swish6'), GlobalAveragePool()), f[6]),
      Block((Conv(1, use_batch_norm=False), Activation('swish6')), f[7]),
  ))


# MobileNetV3-Large per stage: width, then per layer (kernel, expansion, SE)
# or None for a skipped layer (Howard et al. 2019, Table 1).
_V3_LARGE_STAGES = (
    (24, ((3, 4.0, False), (3, 3.0, False), None, None)),
    (40, ((5, 3.0, True), (5, 3.0, True), (5, 3.0, True), None)),
    (80, ((3, 6.0, False), (3, 2.5, False), (3, 2.3, False), (3, 2.3, False))),
    (112, ((3, 6.0, True), (3, 6.0, True), None, None)),
    (160, ((5, 6.0, True), (5, 6.0, True), (5, 6.0, True), None)),
)


def _fixed_bneck(layer, strides: int, activation: str) -> DepthwiseBottleneck:
  kernel, expansion, se = layer
  return bneck(op(kernel), widths(FilterMultiplier(expansion)), op(se),
               strides, activation)


def _fixed_stage(i: int) -> Block:
  filters, layers = _V3_LARGE_STAGES[i]
  act = STAGE_ACTIVATIONS[i]
  body = [_fixed_bneck(layers[0], STAGE_STRIDES[i], act)]
  body += [optional(_fixed_bneck(l, 1, act), absent=False) if l else
           optional(None, present=False) for l in layers[1:]]
  if STAGE_ENDPOINTS[i]:
    body.append(DetectionEndpoint())
  return Block(tuple(body), widths(filters))


def mobilenet_v3_large() -> ConvTower:
  """MobileNetV3-Large with its published widths: one architecture."""
  return ConvTower((
      # Stem
      Block((Conv(op(3), strides=2), Activation('swish6'),
             optional(SeparableConv(op(3), 1, 'relu'), absent=False),
             DetectionEndpoint()), widths(16)),
      # Body
      *[_fixed_stage(i) for i in range(5)],
      # Head
      Block((Conv(1), Activation('swish6'), GlobalAveragePool()), widths(960)),
      Block((Conv(1, use_batch_norm=False), Activation('swish6')),
            widths(1280)),
  ))


def mobilenet_v3_large_indices(spec) -> Sequence[int]:
  """Every decision of `mobilenet_v3_large()` has one choice: all zeros."""
  return [0] * len(schema.decisions(spec))
