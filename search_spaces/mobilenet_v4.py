"""MobileNetV4's Conv networks and the UIB spaces of its two-stage search.

Layouts, layer tables and the search: docs/mobilenet_v4.md (Qin et al. 2024,
sections 4 and 6.1 and appendix tables; the layer tables agree with
TensorFlow Model Garden's and timm's MobileNetV4 Conv networks).

Spaces per model size (Conv-S, 224x224, here):
  * `<size>_coarse`: the stage widths and depths searched, every searched
    block an IB with expansion 4 and a 3x3 middle depthwise conv;
  * `<size>_fine_<W>x<N>_<W>x<N>`: the widths and depths of a coarse result
    (W filters and N blocks per stage, from `coarse_result`), both
    depthwise kernels of every block searched (none, 3x3 or 5x5 each: the
    nine UIB instantiations, eight in a strided block, which cannot be an
    FFN), expansion 4; `<size>_fine` is the one at the published network's
    widths and depths;
  * `<size>_search`: both at once (the paper's one-stage search), which
    holds every coarse and every fine architecture; a latency model
    calibrated on it scores both stages.
Depth is TuNAS's and searched in the coarse stage (and the one-stage
search): a stage's first (strided) block is always there, the others are
residual and may be `Zero`, i.e. identities; the fine stage keeps the
coarse result's depths.
"""

import dataclasses
import re
from typing import Any, Callable, Optional, Sequence, Tuple

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (NO_DEPTHWISE, Block, ConvTower,
                                      FilterMultiplier, Residual,
                                      UniversalInvertedBottleneck, Zero)
from search_spaces.proxylessnas import WIDTH_MULTIPLIERS, width_choices

# Kernel choices of each depthwise position: 0 is none (specs.NO_DEPTHWISE).
KERNELS = (0, 3, 5)
# The sizes of a depthwise conv that is there: a strided block's middle one
# (it carries the stride), or its start one when it has no middle one.
PRESENT_KERNELS = (3, 5)
# docs/mobilenet_v4.md: expansion fixed at 4 while searching; the coarse
# stage's blocks are IBs with a 3x3 middle depthwise conv.
EXPANSION = 4.0
COARSE_KERNELS = (0, 3)  # (start, middle)

# The reference nets as block strings (architecture.block_string's
# notation; docs/mobilenet_v4.md has the tables): `uib_a5_k3_e4_s2_relu` is
# a UIB with a 5x5 start and a 3x3 middle depthwise conv (0: none),
# expansion x4 of its input, stride 2 and ReLU; `+` marks a residual.
# MobileNetV4's head: 1x1 conv to 960, BN, ReLU, pool, 1x1 conv to 1280 (no
# bias) with BN and ReLU; the builder adds the classifier.
HEAD = '960: conv1, relu, gap | 1280: conv1, relu'


def _uibs(spec: str, count: int = 1) -> str:
  """`count` residual UIBs `a/k/e`, as the tables' `x n` rows."""
  start, middle, expansion = spec.split('/')
  return ', '.join([f'+uib_a{start}_k{middle}_e{expansion}_relu'] * count)


CONV_SMALL_STEM = ' | '.join((
    '32: conv3_s2, relu',
    # The two stem pairs: 3x3 stride 2, then 1x1, each with BN and ReLU.
    '32: conv3_s2, relu', '32: conv1, relu',
    '96: conv3_s2, relu', '64: conv1, relu'))
MOBILENET_V4_CONV_SMALL = ' | '.join((  # 224x224.
    CONV_SMALL_STEM,
    '96: uib_a5_k5_e3_s2_relu, ' + _uibs('0/3/2', 4) + ', ' + _uibs('3/0/4'),
    '128: uib_a3_k3_e6_s2_relu, ' + ', '.join((
        _uibs('5/5/4'), _uibs('0/5/4'), _uibs('0/5/3'), _uibs('0/3/4', 2))),
    HEAD))
MOBILENET_V4_CONV_MEDIUM = ' | '.join((  # 256x256.
    '32: conv3_s2, relu',
    # FusedIB: 3x3 stride 2 to 4 x 32 with BN and ReLU, 1x1 with BN only.
    '128: conv3_s2, relu', '48: conv1',
    '80: uib_a3_k5_e4_s2_relu, ' + _uibs('3/3/2'),
    '160: uib_a3_k5_e6_s2_relu, ' + ', '.join((
        _uibs('3/3/4', 2), _uibs('3/5/4'), _uibs('3/3/4'), _uibs('3/0/4'),
        _uibs('0/0/2'), _uibs('3/0/4'))),
    '256: uib_a5_k5_e6_s2_relu, ' + ', '.join((
        _uibs('5/5/4'), _uibs('3/5/4', 2), _uibs('0/0/4'), _uibs('3/0/4'),
        _uibs('3/5/2'), _uibs('5/5/4'), _uibs('0/0/4', 2), _uibs('5/0/2'))),
    HEAD))
MOBILENET_V4_CONV_LARGE = ' | '.join((  # 384x384.
    '24: conv3_s2, relu',
    '96: conv3_s2, relu', '48: conv1',  # FusedIB, expansion 4.
    '96: uib_a3_k5_e4_s2_relu, ' + _uibs('3/3/4'),
    '192: uib_a3_k5_e4_s2_relu, ' + ', '.join((
        _uibs('3/3/4', 3), _uibs('3/5/4'), _uibs('5/3/4', 5),
        _uibs('3/0/4'))),
    '512: uib_a5_k5_e4_s2_relu, ' + ', '.join((
        _uibs('5/5/4', 3), _uibs('5/0/4'), _uibs('5/3/4'), _uibs('5/0/4', 2),
        _uibs('5/3/4'), _uibs('5/5/4'), _uibs('5/0/4', 3))),
    HEAD))


def fixed_network(block_string: str) -> ConvTower:
  """A reference net: the block string with one-choice width decisions,
  so that it has an architecture string (all zeros) as every net does."""
  tower = architecture.parse_block_string(block_string)
  return ConvTower(tuple(
      dataclasses.replace(b, filters=OneOf([b.filters], schema.FILTERS))
      for b in tower.blocks), tower.filters_base)


def fixed_indices(spec: ConvTower) -> Tuple[int, ...]:
  return (0,) * len(schema.decisions(spec))


@dataclasses.dataclass(frozen=True)
class Layout:
  """One model size's searched layout.

  Attributes:
    name: the spaces' name prefix.
    reference: the published network as a block string.
    stem: the fixed stem as a block string.
    stages: (base width, most blocks) of each searched stage; each begins
      with a stride-2 block.
    image_size: the published input side.
    madds_target: the default MAdds target of a search.
  """
  name: str
  reference: str
  stem: str
  stages: Tuple[Tuple[int, int], ...]
  image_size: int
  madds_target: float

  def widths(self, stage: int) -> Tuple[int, ...]:
    """A stage's width choices: TuNAS's multipliers of its base width."""
    return width_choices(self.stages[stage][0], WIDTH_MULTIPLIERS)


# Conv-S: the published stem (first conv and two conv pairs), then two
# searched stages around Conv-S's 96 and 128 filters (six blocks each
# there), then the head. The paper does not publish its width choices:
# these are TuNAS's multipliers (docs/method.md section 3). Its MAdds
# target is the paper's 285M (docs/mobilenet_v4.md).
CONV_SMALL = Layout(
    name='mobilenet_v4_conv_small', reference=MOBILENET_V4_CONV_SMALL,
    stem=CONV_SMALL_STEM,
    stages=((96, 8), (128, 8)), image_size=224, madds_target=285e6)
LAYOUTS = (CONV_SMALL,)


# The registered specs, one named function each (tests key graphs by name).
def mobilenet_v4_conv_small() -> ConvTower:
  return fixed_network(MOBILENET_V4_CONV_SMALL)


def mobilenet_v4_conv_medium() -> ConvTower:
  return fixed_network(MOBILENET_V4_CONV_MEDIUM)


def mobilenet_v4_conv_large() -> ConvTower:
  return fixed_network(MOBILENET_V4_CONV_LARGE)


def mobilenet_v4_conv_small_coarse() -> ConvTower:
  return coarse(CONV_SMALL)


def mobilenet_v4_conv_small_fine() -> ConvTower:
  return fine(CONV_SMALL, default_stages(CONV_SMALL))


def mobilenet_v4_conv_small_search() -> ConvTower:
  return one_stage(CONV_SMALL)


def _uib(start, middle, strides: int = 1) -> UniversalInvertedBottleneck:
  return UniversalInvertedBottleneck(start, middle,
                                     FilterMultiplier(EXPANSION), strides)


def _op(*choices) -> OneOf:
  return OneOf(choices, schema.OP)


def _optional(layer) -> Residual:
  """A block the search may skip: Residual(OneOf[layer, Zero])."""
  return Residual(_op(layer, Zero()))


def _searched_uib(strides: int = 1):
  """Both depthwise kernels searched: the nine UIB instantiations.

  A strided block strides its middle depthwise conv, or its start one when
  it has none (specs.UniversalInvertedBottleneck), so it is an op choice
  between the six with a middle depthwise conv and the two ConvNext-like
  ones: eight (a strided FFN has no conv to carry the stride).
  """
  if strides == 1:
    return _uib(_op(*KERNELS), _op(*KERNELS))
  return _op(_uib(_op(*KERNELS), _op(*PRESENT_KERNELS), strides),
             _uib(_op(*PRESENT_KERNELS), NO_DEPTHWISE, strides))


def _tower(layout: Layout, stages: Sequence[Block]) -> ConvTower:
  head = architecture.parse_block_string(HEAD).blocks
  stem = architecture.parse_block_string(layout.stem).blocks
  return ConvTower(tuple(stem) + tuple(stages) + tuple(head))


def _widths(layout: Layout, stage: int) -> OneOf:
  return OneOf(layout.widths(stage), schema.FILTERS)


def _searched_depths(layout: Layout, block: Callable[[int], Any]
                     ) -> ConvTower:
  """Searched stage widths and depths of `block(strides)`s."""
  stages = []
  for i, (_, most) in enumerate(layout.stages):
    layers = [block(2)] + [_optional(block(1)) for _ in range(most - 1)]
    stages.append(Block(tuple(layers), _widths(layout, i)))
  return _tower(layout, stages)


def coarse(layout: Layout) -> ConvTower:
  """Widths and depths searched; every block an IB, x4, 3x3 middle DW."""
  return _searched_depths(
      layout, lambda strides: _uib(*COARSE_KERNELS, strides=strides))


def one_stage(layout: Layout) -> ConvTower:
  """Widths, depths and both depthwise kernels of every block searched."""
  return _searched_depths(layout, _searched_uib)


def fine(layout: Layout, stages: Sequence[Tuple[int, int]]) -> ConvTower:
  """Each stage's (width, blocks) fixed; both depthwise kernels searched.

  Raises:
    ValueError: for a width outside the coarse stage's choices or a number
      of blocks outside 1..most.
  """
  check_stages(layout, stages)
  blocks = []
  for width, count in stages:
    layers = [_searched_uib(strides=2)]
    layers += [Residual(_searched_uib()) for _ in range(count - 1)]
    blocks.append(Block(tuple(layers), width))
  return _tower(layout, blocks)


def check_stages(layout: Layout, stages: Sequence[Tuple[int, int]]) -> None:
  """Raises ValueError unless `stages` is a coarse result of `layout`."""
  if len(stages) != len(layout.stages):
    raise ValueError(f'{layout.name} has {len(layout.stages)} searched '
                     f'stages, got {len(stages)}')
  for i, (width, count) in enumerate(stages):
    if width not in layout.widths(i):
      raise ValueError(f'stage {i + 1} width {width} is not one of the '
                       f'coarse choices {list(layout.widths(i))}')
    most = layout.stages[i][1]
    if not 1 <= count <= most:
      raise ValueError(f'stage {i + 1} has {count} blocks; valid: '
                       f'1..{most}')


def fine_name(layout: Layout, stages: Sequence[Tuple[int, int]]) -> str:
  """`<name>_fine_<W>x<N>_...`: the fine space of one coarse result."""
  return f'{layout.name}_fine_' + '_'.join(f'{w}x{n}' for w, n in stages)


_FINE = re.compile(r'(?P<name>.+)_fine_(?P<stages>\d+x\d+(?:_\d+x\d+)*)$')


def parse_fine_name(name: str
                    ) -> Optional[Tuple[Layout, Tuple[Tuple[int, int], ...]]]:
  """(layout, stages) of a `fine_name`, or None for another kind of name.

  Raises:
    ValueError: for a fine name whose stages do not fit its layout.
  """
  match = _FINE.match(name)
  layout = match and next((l for l in LAYOUTS
                           if l.name == match.group('name')), None)
  if not layout:
    return None
  stages = tuple(tuple(int(v) for v in s.split('x'))
                 for s in match.group('stages').split('_'))
  check_stages(layout, stages)
  return layout, stages


def default_stages(layout: Layout) -> Tuple[Tuple[int, int], ...]:
  """The published network's widths and depths (Conv-S: 96 x 6, 128 x 6)."""
  net = architecture.parse_block_string(layout.reference)
  first = len(architecture.parse_block_string(layout.stem).blocks)
  return tuple((b.filters, len(b.layers))
               for b in net.blocks[first:first + len(layout.stages)])


def layout_of_coarse(spec: ConvTower) -> Optional[Layout]:
  """The layout whose coarse space `spec` is, or None."""
  return next((l for l in LAYOUTS if coarse(l) == spec), None)


def coarse_result(spec: ConvTower, indices: Sequence[int]
                  ) -> Tuple[Layout, Tuple[Tuple[int, int], ...]]:
  """(layout, per stage (width, blocks)) of a coarse architecture.

  Skipped blocks are identities and every kept one has the stage's shape,
  so the fine space at these stages holds this very network (as the IB
  choice of every block).

  Raises:
    ValueError: if `spec` is no layout's coarse space.
  """
  layout = layout_of_coarse(spec)
  if layout is None:
    raise ValueError('the spec is not a MobileNetV4 coarse space (one of '
                     + ', '.join(f'{l.name}_coarse' for l in LAYOUTS) + ')')
  pruned = architecture.prune(spec, indices)
  first = len(architecture.parse_block_string(layout.stem).blocks)
  stages = tuple(
      (block.filters, sum(not isinstance(getattr(l, 'layer', l), Zero)
                          for l in block.layers))
      for block in pruned.blocks[first:first + len(layout.stages)])
  return layout, stages
