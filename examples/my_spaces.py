"""A search space of your own, in one file (docs/custom_search_space.md).

  python bin/describe_arch.py --search_space=examples.my_spaces:tiny
  python bin/search.py --search_space=examples.my_spaces:tiny \\
      --model_dir=/tmp/tiny --train_batch_size=32 --max_steps=200

`tiny` returns a model spec: a stem, two searchable blocks and a head. The
tools import this module only because it is named.
"""

from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      GlobalAveragePool, Residual, Zero)


def bneck(strides: int = 1) -> DepthwiseBottleneck:
  """An inverted bottleneck with a searched kernel size and expansion."""
  return DepthwiseBottleneck(
      kernel_size=OneOf([3, 5], schema.OP),
      expansion_filters=OneOf([FilterMultiplier(3.0), FilterMultiplier(6.0)],
                              schema.FILTERS),
      strides=strides)


def optional(layer) -> Residual:
  """`layer` with a skip connection, or only the skip (the layer searched)."""
  return Residual(OneOf([layer, Zero()], schema.OP))


def tiny() -> ConvTower:
  """Tiny: a stem, two searchable blocks and a head (2^12 = 4,096 architectures)."""
  return ConvTower((
      # Stem
      Block((Conv(3, strides=2), Activation('relu')), 16),
      # Body: each block downsamples, then may add a residual bottleneck.
      Block((bneck(strides=2), optional(bneck())),
            OneOf([16, 24], schema.FILTERS)),
      Block((bneck(strides=2), optional(bneck())),
            OneOf([32, 48], schema.FILTERS)),
      # Head
      Block((Conv(1), Activation('relu'), GlobalAveragePool()), 64),
  ))
