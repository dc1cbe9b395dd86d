"""The tiny search space of the end-to-end tests, without TensorFlow.

It has every kind of decision the real spaces have (op choices, a skippable
residual layer with nested decisions, searched widths and expansions);
`tiny.py` builds searches of it.
"""

from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      GlobalAveragePool, Residual, Zero)


def bneck(strides):
  return DepthwiseBottleneck(
      kernel_size=OneOf([3, 5], schema.OP),
      expansion_filters=OneOf([FilterMultiplier(1.0), FilterMultiplier(3.0)],
                              schema.FILTERS),
      strides=strides)


def tiny_spec() -> ConvTower:
  return ConvTower((
      # Stem
      Block((Conv(3, strides=2), Activation('relu')), OneOf([8, 16],
                                                            schema.FILTERS)),
      # Body
      Block((bneck(strides=2), Residual(OneOf([bneck(1), Zero()], schema.OP))),
            OneOf([8, 16, 24], schema.FILTERS)),
      # Head
      Block((Conv(1), Activation('relu'), GlobalAveragePool()), 32),
  ))
