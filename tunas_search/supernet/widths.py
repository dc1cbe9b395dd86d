"""Channel widths while building: a fixed int, or mask-weighted prefix options.

A `Width` lists `(coefficient, width)` options. In a stand-alone network there
is one option with coefficient 1.0. In a supernet a searched width has one
option per choice, weighted by its mask entry, and the channel mask is
`sum_k coefficient_k * (arange(max) < width_k)` (docs/method.md section 4: a searched
width is a prefix mask over the largest one).
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tunas_search import specs
from tunas_search.schema import OneOf


@dataclasses.dataclass(frozen=True)
class Width:
  """The width of a tensor being built.

  Attributes:
    options: `(coefficient, width)` pairs with distinct widths; a coefficient
      is the Python float 1.0 (fixed) or a float32 scalar tensor (searched).
    mask: float32 tensor [max] of per-channel weights, or None when every
      option is the largest width (all channels always on).
  """
  options: Tuple[Tuple[Any, int], ...]
  mask: Optional[tf.Tensor] = None

  @property
  def max(self) -> int:
    """Channel count of tensors and variables of this width."""
    return max(w for _, w in self.options)


def fixed(width: int) -> Width:
  """A width that is not searched."""
  return Width(((1.0, int(width)),))


def from_options(options: Sequence[Tuple[Any, int]]) -> Width:
  """Builds a `Width`, merging equal widths and making the channel mask.

  Args:
    options: `(coefficient, width)` pairs (widths may repeat).

  Returns:
    The width; its mask is a float32 [max] tensor unless all widths are equal.
  """
  merged: Dict[int, Any] = {}
  for coef, width in options:
    merged[width] = coef if width not in merged else merged[width] + coef
  if len(merged) == 1:
    return fixed(next(iter(merged)))
  widest = max(merged)
  prefixes = np.stack([(np.arange(widest) < w).astype(np.float32)
                       for w in merged])
  coefs = tf.stack([tf.cast(c, tf.float32) for c in merged.values()])
  mask = tf.tensordot(coefs, tf.constant(prefixes), axes=1)
  return Width(tuple((c, w) for w, c in merged.items()), mask)


def map_widths(width: Width, fn: Callable[[int], int]) -> Width:
  """The width `fn(w)` for every option `w` (same coefficients)."""
  return from_options([(c, fn(w)) for c, w in width.options])


def selected_index(oneof: OneOf, path: str) -> Optional[int]:
  """The fixed choice of a decision, or None when it is searched.

  A single-choice decision is always fixed. Otherwise a numpy mask must be
  one-hot (stand-alone network) and a tensor mask means a supernet.

  Args:
    oneof: the decision.
    path: its spec path, for error messages.

  Returns:
    The selected choice index, or None for a tensor mask.

  Raises:
    ValueError: if the mask is missing or not a one-hot vector of the right
      length.
  """
  if len(oneof.choices) == 1:
    return 0
  if oneof.mask is None:
    raise ValueError(
        f'decision {path} has no mask; attach masks with '
        f'architecture.with_indices or schema.with_masks')
  if tf.is_tensor(oneof.mask):
    return None
  mask = np.asarray(oneof.mask)
  if (mask.shape != (len(oneof.choices),) or np.sum(mask != 0) != 1
      or mask.max() != 1):
    raise ValueError(
        f'decision {path}: a numpy mask must be one-hot with '
        f'{len(oneof.choices)} entries, got {mask.tolist()}')
  return int(np.argmax(mask))


def mask_entries(oneof: OneOf) -> list:
  """The float32 scalar mask entries of a searched decision."""
  mask = tf.cast(oneof.mask, tf.float32)
  return [mask[i] for i in range(len(oneof.choices))]


def weighted_choices(value: Any, path: str) -> list:
  """`(coefficient, choice)` pairs of a plain value or a decision."""
  if not isinstance(value, OneOf):
    return [(1.0, value)]
  index = selected_index(value, path)
  if index is not None:
    return [(1.0, value.choices[index])]
  return list(zip(mask_entries(value), value.choices))


def block_width(filters: Any, path: str) -> Width:
  """The width of a block's `filters` (an int or a OneOf of ints)."""
  return from_options([(c, int(f))
                       for c, f in weighted_choices(filters, path)])


def expanded_width(input_width: Width, expansion: Any, base: int,
                   path: str) -> Width:
  """A bottleneck's expanded width, relative to its input width.

  docs/method.md section 1: for input choice i and multiplier j the expanded width is
  `scale_filters(in_width_i, mult_j, base)` with weight `m_in_i * m_exp_j`.

  Args:
    input_width: the layer's input width.
    expansion: a `FilterMultiplier` or a OneOf of them.
    base: rounding base of widths (`ConvTower.filters_base`).
    path: spec path of `expansion`.

  Returns:
    The expanded width.
  """
  options = []
  for c_in, w_in in input_width.options:
    for c_exp, mult in weighted_choices(expansion, path):
      if not isinstance(mult, specs.FilterMultiplier):
        raise ValueError(f'{path}: expected FilterMultiplier, got {mult!r}')
      coef = c_exp if isinstance(c_in, float) else c_in * c_exp
      options.append((coef, specs.scale_filters(w_in, mult.scale, base)))
  return from_options(options)
