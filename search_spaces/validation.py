"""Checks a user's model spec before anything is built from it.

The builder and the cost models fail deep inside graph construction on a
malformed spec, with a message that does not say which part of the spec is
wrong. A space from a user's package or module (search_spaces.plugins) is
checked here first, so a mistake becomes one line naming its path in the
spec (the path `schema.decisions` and the builder's variable scopes use).
The shipped spaces are not checked: they keep the single-choice decisions
that the Pixel-1 cost model's feature layout counts (docs/cost_models.md).
"""

import dataclasses
from typing import Any, Optional, Tuple

from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.space.schema import OneOf

# The layer records the builder (tunas_search/supernet/builder.py) can build;
# tests/search_spaces/test_plugins.py checks that the two lists agree.
LAYER_TYPES = (specs.Conv, specs.SeparableConv, specs.DepthwiseBottleneck,
               specs.UniversalInvertedBottleneck, specs.Activation,
               specs.Residual, specs.Zero, specs.GlobalAveragePool,
               specs.DetectionEndpoint)


class SpecError(ValueError):
  """A spec that cannot be searched; the message starts with its path.

  Attributes:
    path: the offending node's path in the spec ('' for the spec itself).
    message: what is wrong with it.
  """

  def __init__(self, path: str, message: str, space: str = ''):
    where = f'{space}: ' if space else ''
    super().__init__(f'{where}spec path {path or "<root>"}: {message}')
    self.path = path
    self.message = message

  def in_space(self, space: str) -> 'SpecError':
    """The same error, its message naming the search space first."""
    return SpecError(self.path, self.message, space)


def _join(path: str, *segments: Any) -> str:
  return '/'.join([path] + [str(s) for s in segments]) if path else '/'.join(
      str(s) for s in segments)


def _choices(value: Any, path: str, tag: str) -> Tuple[Tuple[str, Any], ...]:
  """(path, value) of every choice of a plain value or a decision."""
  if not isinstance(value, OneOf):
    return ((path, value),)
  if len(value.choices) < 2:
    raise SpecError(path, 'a decision needs at least two choices (write the '
                    'value itself for a fixed one)')
  if value.tag != tag:
    raise SpecError(path, f'this decision must be tagged schema.'
                    f'{tag.upper()}, got {value.tag!r}')
  return tuple((_join(path, 'choices', i), c)
               for i, c in enumerate(value.choices))


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _check_kernel(value: Any, path: str, smallest: int = 1) -> None:
  for where, k in _choices(value, path, schema.OP):
    if not _is_int(k) or k < smallest:
      raise SpecError(where, f'a kernel size must be an int >= {smallest}'
                      f'{" (0: none)" if smallest == 0 else ""}, got {k!r}')


def _check_strides(value: Any, path: str) -> int:
  if not _is_int(value) or value < 1:
    raise SpecError(path, f'strides must be a positive int, got {value!r}')
  return value


def _check_block_filters(value: Any, path: str) -> None:
  """Searched widths are prefix masks of the widest: distinct positive ints."""
  widths = _choices(value, path, schema.FILTERS)
  for where, w in widths:
    if not _is_int(w) or w < 1:
      raise SpecError(where, 'a width must be a positive int (searched widths '
                      'are masked as prefixes of the widest), got '
                      f'{w!r}')
  if len({w for _, w in widths}) != len(widths):
    raise SpecError(path, 'width choices repeat: '
                    f'{[w for _, w in widths]}')


def _check_expansion(value: Any, path: str) -> None:
  for where, m in _choices(value, path, schema.FILTERS):
    if not isinstance(m, specs.FilterMultiplier) or not m.scale > 0:
      raise SpecError(where, 'an expansion must be a FilterMultiplier with a '
                      f'positive scale (a width relative to the input), got '
                      f'{m!r}')


def _check_layer(layer: Any, path: str) -> int:
  """Checks one layer (or op decision); returns its stride."""
  if isinstance(layer, OneOf):
    strides = {_check_layer(choice, where)
               for where, choice in _choices(layer, path, schema.OP)
               if not isinstance(choice, specs.Zero)}
    if len(strides) > 1:
      raise SpecError(path, 'op choices must have the same stride (the '
                      f'supernet switches between them), got {sorted(strides)}')
    return strides.pop() if strides else 1
  if not isinstance(layer, LAYER_TYPES):
    raise SpecError(path, f'unknown layer type {type(layer).__name__}; '
                    'valid: ' + ', '.join(t.__name__ for t in LAYER_TYPES))
  if isinstance(layer, (specs.Conv, specs.SeparableConv,
                        specs.DepthwiseBottleneck)):
    _check_kernel(layer.kernel_size, _join(path, 'kernel_size'))
    if isinstance(layer, specs.DepthwiseBottleneck):
      _check_expansion(layer.expansion_filters,
                       _join(path, 'expansion_filters'))
      for where, se in _choices(layer.use_squeeze_and_excite,
                                _join(path, 'use_squeeze_and_excite'),
                                schema.OP):
        if not isinstance(se, bool):
          raise SpecError(where, f'expected True or False, got {se!r}')
    return _check_strides(layer.strides, _join(path, 'strides'))
  if isinstance(layer, specs.UniversalInvertedBottleneck):
    for field in ('start_kernel_size', 'middle_kernel_size'):
      _check_kernel(getattr(layer, field), _join(path, field), smallest=0)
    _check_expansion(layer.expansion_filters,
                     _join(path, 'expansion_filters'))
    return _check_strides(layer.strides, _join(path, 'strides'))
  if isinstance(layer, specs.Residual):
    if _check_layer(layer.layer, _join(path, 'layer')) != 1:
      raise SpecError(path, 'a residual layer must keep its input shape '
                      '(stride 1)')
  return 1


def check_spec(spec: Any, image_size: Optional[int] = None) -> None:
  """Raises SpecError unless `spec` is a searchable ConvTower.

  Checks what the builder and the controller need: known layer records,
  decisions with at least two choices and the right tag, widths that can be
  masked (distinct positive ints; expansions as FilterMultipliers), equal
  strides across op choices and stride 1 inside residuals, and, given an
  image size, no stride applied to a 1x1 feature map (SAME padding: each
  stride-s layer maps a side n to ceil(n / s)).

  Args:
    spec: the model spec a user's function returned.
    image_size: the input side to check strides against, or None.

  Raises:
    SpecError: naming the path of the first offending node in the spec.
  """
  if not isinstance(spec, specs.ConvTower):
    raise SpecError('', f'expected a specs.ConvTower, got '
                    f'{type(spec).__name__}')
  if not _is_int(spec.filters_base) or spec.filters_base < 1:
    raise SpecError('filters_base', 'must be a positive int, got '
                    f'{spec.filters_base!r}')
  if not spec.blocks:
    raise SpecError('blocks', 'a ConvTower needs at least one Block')
  side = image_size
  for i, block in enumerate(spec.blocks):
    path = _join('blocks', i)
    if not isinstance(block, specs.Block):
      raise SpecError(path, f'expected a specs.Block, got '
                      f'{type(block).__name__}')
    _check_block_filters(block.filters, _join(path, 'filters'))
    if not block.layers:
      raise SpecError(_join(path, 'layers'), 'a Block needs at least one layer')
    for j, layer in enumerate(block.layers):
      layer_path = _join(path, 'layers', j)
      stride = _check_layer(layer, layer_path)
      if side is not None and stride > 1:
        if side == 1:
          raise SpecError(layer_path, f'stride {stride} on a 1x1 feature map: '
                          f'the strides before it already reduce a '
                          f'{image_size}x{image_size} input to 1x1')
        side = -(-side // stride)
  # Every record must be one the JSON format knows (model_spec.json).
  for node_path, node in _records(spec, ''):
    if dataclasses.is_dataclass(node) and not isinstance(
        node, (OneOf, specs.ConvTower, specs.Block, specs.FilterMultiplier)
        + LAYER_TYPES):
      raise SpecError(node_path, f'unknown record {type(node).__name__}')


def _records(node: Any, path: str):
  """(path, node) of every node of a spec, parents first."""
  yield path, node
  kids = (list(enumerate(node.choices)) if isinstance(node, OneOf)
          else schema.children(node))
  for segment, child in kids:
    if isinstance(node, OneOf):
      segment = f'choices/{segment}'
    yield from _records(child, _join(path, segment))
