"""Layer and network records that model specs are made of (docs/method.md sections 1-2).

Every record is a frozen dataclass registered for JSON serialisation. Field
order is part of the format: it fixes the traversal order of decisions and the
feature layout of the Pixel-1 cost model (docs/cost_models.md), so new
fields may only be appended.

Width conventions, shared by the builder and the cost models:
  * A `Block`'s `filters` (an int or a OneOf of ints) is the output width of
    every width-changing layer in it (`Conv`, `SeparableConv`,
    `DepthwiseBottleneck`, `UniversalInvertedBottleneck`).
  * A layer's input width is the output width of the layer before it; the
    network input has 3 channels (or the dataset's channel count).
  * `DepthwiseBottleneck.expansion_filters` (and the UIB's) is a
    `FilterMultiplier` (or OneOf of them) relative to the layer's input
    width, rounded by `scale_filters`.
"""

import dataclasses
from typing import Any, Tuple, Union

from tunas_search.space import serialization
from tunas_search.space.schema import OneOf

# Activation names understood by the builder (docs/method.md section 1).
ACTIVATIONS = ('relu', 'relu6', 'swish6', 'sigmoid', 'identity')


def scale_filters(filters: int, multiplier: float, base: int = 8) -> int:
  """Rounds `filters * multiplier` half-up to a multiple of `base`, >= base.

  docs/method.md section 1 ("Width rounding").
  """
  return max(base, base * int(filters * multiplier / base + 0.5))


def make_divisible(value: float, divisor: int = 8) -> int:
  """Squeeze-excite width rounding (docs/method.md section 1, from MobileNetV3).

  Rounds to the nearest multiple of `divisor` (at least `divisor`) and adds one
  `divisor` when that lost more than 10% of `value`.
  """
  rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
  if rounded < 0.9 * value:
    rounded += divisor
  return rounded


def _check_activation(name: str) -> None:
  if name not in ACTIVATIONS:
    raise ValueError(f'unknown activation {name!r}; valid: {ACTIVATIONS}')


@serialization.register
@dataclasses.dataclass(frozen=True)
class FilterMultiplier:
  """A width relative to the layer's input width: `scale_filters(in, scale)`."""
  scale: float


@serialization.register
@dataclasses.dataclass(frozen=True)
class Conv:
  """k x k convolution -> BN (if `use_batch_norm`, else a bias) (no activation)."""
  kernel_size: Union[int, OneOf]
  strides: int = 1
  use_batch_norm: bool = True


@serialization.register
@dataclasses.dataclass(frozen=True)
class SeparableConv:
  """Depthwise k x k -> BN -> activation -> 1x1 conv -> BN (docs/method.md section 2)."""
  kernel_size: Union[int, OneOf]
  strides: int = 1
  activation: str = 'relu'

  def __post_init__(self):
    _check_activation(self.activation)


@serialization.register
@dataclasses.dataclass(frozen=True)
class DepthwiseBottleneck:
  """Inverted bottleneck (docs/method.md section 2).

  1x1 expand -> BN -> act -> depthwise k x k (stride) -> BN -> act ->
  [squeeze-excite] -> 1x1 project -> BN. Not residual by itself: wrap it in
  `Residual` for a skip connection.
  """
  kernel_size: Union[int, OneOf]
  expansion_filters: Union[FilterMultiplier, OneOf]
  use_squeeze_and_excite: Union[bool, OneOf] = False
  strides: int = 1
  activation: str = 'relu'
  se_inner_activation: str = 'relu'
  se_gating_activation: str = 'sigmoid'

  def __post_init__(self):
    for name in (self.activation, self.se_inner_activation,
                 self.se_gating_activation):
      _check_activation(name)


# `UniversalInvertedBottleneck`'s kernel size of an absent depthwise conv.
NO_DEPTHWISE = 0


def _kernel_choices(value: Any) -> Tuple[Any, ...]:
  return value.choices if isinstance(value, OneOf) else (value,)


@serialization.register
@dataclasses.dataclass(frozen=True)
class UniversalInvertedBottleneck:
  """MobileNetV4's Universal Inverted Bottleneck (UIB; docs/mobilenet_v4.md).

  [start depthwise k_a x k_a -> BN] -> 1x1 expand -> BN -> act ->
  [middle depthwise k_m x k_m -> BN -> act] -> 1x1 project -> BN
  (Qin et al. 2024, section 4). A kernel size of `NO_DEPTHWISE` (0) leaves
  that depthwise conv out: IB (0, k), ConvNext-like (k, 0), ExtraDW (k1,
  k2), FFN (0, 0). The 1x1 convs and their BNs are shared by every choice of
  the two kernel sizes. Not residual by itself: wrap it in `Residual` for a
  skip connection.

  The stride is the middle depthwise conv's, or the start one's in a block
  without a middle one (`stride_on_start`; timm's rule, TF Model Garden's
  `middle_dw_downsample=False`), so the 1x1 expansion then runs at the
  output's resolution. Which conv strides must not depend on a choice: a
  strided block's middle kernel is either never none or always none, and in
  the latter case its start kernel is never none (a strided FFN has no
  conv to carry the stride).
  """
  start_kernel_size: Union[int, OneOf]
  middle_kernel_size: Union[int, OneOf]
  expansion_filters: Union[FilterMultiplier, OneOf]
  strides: int = 1
  activation: str = 'relu'

  def __post_init__(self):
    _check_activation(self.activation)
    if self.strides == 1:
      return
    middle = set(_kernel_choices(self.middle_kernel_size))
    if NO_DEPTHWISE in middle and len(middle) > 1:
      raise ValueError(
          f'a UIB with stride {self.strides} strides its middle depthwise '
          'conv, or its start one when it has no middle one, so the middle '
          f'kernel may not be searched between {NO_DEPTHWISE} (none) and a '
          f'size: got {self.middle_kernel_size!r}; make the two kinds of '
          'block two op choices')
    if middle == {NO_DEPTHWISE} and NO_DEPTHWISE in _kernel_choices(
        self.start_kernel_size):
      raise ValueError(
          f'a UIB with stride {self.strides} and no middle depthwise conv '
          'strides its start depthwise conv; start_kernel_size '
          f'{self.start_kernel_size!r} may be {NO_DEPTHWISE} (none), a '
          'strided FFN')

  @property
  def stride_on_start(self) -> bool:
    """Whether the start depthwise conv carries the stride (no middle one)."""
    return self.strides != 1 and set(
        _kernel_choices(self.middle_kernel_size)) == {NO_DEPTHWISE}


@serialization.register
@dataclasses.dataclass(frozen=True)
class Activation:
  """An element-wise activation."""
  name: str

  def __post_init__(self):
    _check_activation(self.name)


@serialization.register
@dataclasses.dataclass(frozen=True)
class Residual:
  """`layer(x) + x`; a residual around `Zero` is the identity."""
  layer: Any


@serialization.register
@dataclasses.dataclass(frozen=True)
class Zero:
  """The skip choice: inside a `Residual` the layer disappears."""


@serialization.register
@dataclasses.dataclass(frozen=True)
class GlobalAveragePool:
  """Spatial mean, keeping a 1x1 spatial shape."""


@serialization.register
@dataclasses.dataclass(frozen=True)
class DetectionEndpoint:
  """A marker for feature-map endpoints; computes nothing."""


@serialization.register
@dataclasses.dataclass(frozen=True)
class Block:
  """Consecutive layers sharing one output width (`filters`)."""
  layers: Tuple[Any, ...]
  filters: Union[int, OneOf]


@serialization.register
@dataclasses.dataclass(frozen=True)
class ConvTower:
  """A whole feature extractor; the classifier is added by the builder.

  Attributes:
    blocks: the blocks, stem first, head last.
    filters_base: the rounding base of every width (8 in all TuNAS spaces).
  """
  blocks: Tuple[Block, ...]
  filters_base: int = 8
