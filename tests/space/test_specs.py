"""Tests for the spec records' width rounding and activation checks."""

import re

import pytest

from tunas_search.space import specs


@pytest.mark.parametrize('filters, multiplier, expected', [
    (16, 6.0, 96),     # Exact multiple of 8.
    (24, 0.5, 16),     # 12 -> 1.5 eighths rounds half up to 2.
    (20, 1.0, 24),     # 2.5 eighths rounds up.
    (19, 1.0, 16),     # 2.375 eighths rounds down.
    (3, 1.0, 8),       # Never below the base.
    (1, 0.1, 8),
])
def test_scale_filters_rounds_half_up_to_multiples_of_8(filters, multiplier,
                                                        expected):
  assert specs.scale_filters(filters, multiplier) == expected


def test_scale_filters_with_another_base():
  assert specs.scale_filters(20, 1.0, base=4) == 20
  assert specs.scale_filters(18, 1.0, base=4) == 20  # 4.5 -> 5 fours.
  assert specs.scale_filters(1, 1.0, base=4) == 4


@pytest.mark.parametrize('value, expected', [
    (24.0, 24),   # Already a multiple.
    (12.0, 16),   # Half-way rounds up: int(12 + 4) // 8 * 8.
    (8.8, 8),     # Below half-way rounds down, and 8 >= 0.9 * 8.8.
    (3.0, 8),     # Never below the divisor.
    (240.0, 240),
    (100.0, 104),  # 12.5 eighths: half-way rounds up.
    (28.0, 32),
])
def test_make_divisible(value, expected):
  assert specs.make_divisible(value) == expected


def test_make_divisible_adds_a_divisor_when_rounding_lost_over_10_percent():
  # int(23 + 8) // 16 * 16 = 16, and 16 < 0.9 * 23 = 20.7: one more 16.
  assert specs.make_divisible(23.0, 16) == 32
  assert specs.make_divisible(11.9) == 16  # 8 < 0.9 * 11.9 = 10.71.
  # 16 >= 0.9 * 17 = 15.3: kept.
  assert specs.make_divisible(17.0, 16) == 16
  # Exactly at the 10% line (0.9 * 160/9 == 16.0) is not "more than 10%".
  assert specs.make_divisible(160 / 9, 16) == 16
  assert specs.make_divisible(8.0, 16) == 16  # At least the divisor.


_ACTIVATION_ERROR = ("unknown activation 'gelu'; valid: ('relu', 'relu6', "
                     "'swish6', 'sigmoid', 'identity')")


@pytest.mark.parametrize('make', [
    lambda act: specs.Activation(act),
    lambda act: specs.SeparableConv(3, activation=act),
    lambda act: specs.DepthwiseBottleneck(3, specs.FilterMultiplier(3.0),
                                          activation=act),
    lambda act: specs.DepthwiseBottleneck(3, specs.FilterMultiplier(3.0),
                                          se_inner_activation=act),
    lambda act: specs.DepthwiseBottleneck(3, specs.FilterMultiplier(3.0),
                                          se_gating_activation=act),
], ids=['activation', 'separable', 'bottleneck', 'se_inner', 'se_gating'])
def test_every_activation_field_is_checked(make):
  with pytest.raises(ValueError, match=f'^{re.escape(_ACTIVATION_ERROR)}$'):
    make('gelu')
  for name in specs.ACTIVATIONS:
    make(name)  # Every listed name is accepted.


def test_record_defaults():
  # The defaults are part of the spec format (docs/method.md section 1).
  assert specs.Conv(3) == specs.Conv(3, 1, True)
  assert specs.SeparableConv(3) == specs.SeparableConv(3, 1, 'relu')
  bottleneck = specs.DepthwiseBottleneck(5, specs.FilterMultiplier(6.0))
  assert (bottleneck.use_squeeze_and_excite, bottleneck.strides,
          bottleneck.activation, bottleneck.se_inner_activation,
          bottleneck.se_gating_activation) == (False, 1, 'relu', 'relu',
                                               'sigmoid')
  assert specs.ConvTower(()).filters_base == 8
