"""Channel widths while building: a fixed int, or mask-weighted prefix options.

A `Width` lists `(coefficient, width)` options. In a stand-alone network there
is one option with coefficient 1.0. In a supernet a searched width has one
option per choice, weighted by its mask entry, and takes one of two forms
(docs/method.md section 4, "Computing at the sampled width"):

* masked: tensors and variables keep the largest width and the channel mask
  `sum_k coefficient_k * (arange(max) < width_k)` zeroes the channels beyond
  the sampled one (TuNAS's form; static shapes, as XLA needs);
* sampled: the variables are sliced to their sampled prefix at run time
  (`narrow`), so tensors have the sampled channel count and a step costs
  what the sampled network costs. Exact for one-hot coefficients, which is
  what a width decision always has (filter warm-up picks the widest choice
  with a one-hot mask too).
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.space.schema import OneOf

# How a supernet computes a searched width (see the module docstring).
MASKED = 'masked'
SAMPLED = 'sampled'
WIDTH_FORMS = (MASKED, SAMPLED)


@dataclasses.dataclass(frozen=True)
class Width:
  """The width of a tensor being built.

  Attributes:
    options: `(coefficient, width)` pairs with distinct widths; a coefficient
      is the Python float 1.0 (fixed) or a float32 scalar tensor (searched).
    mask: masked form: float32 tensor [max] of per-channel weights; None
      when every option is the largest width or in the sampled form.
    size: sampled form: int32 scalar, the sampled channel count; None
      otherwise.
  """
  options: Tuple[Tuple[Any, int], ...]
  mask: Optional[tf.Tensor] = None
  size: Optional[tf.Tensor] = None

  @property
  def max(self) -> int:
    """Channel count of this width's variables (and masked tensors)."""
    return max(w for _, w in self.options)

  @property
  def channels(self) -> Any:
    """Channel count of tensors of this width: `size`, else `max`."""
    return self.max if self.size is None else self.size


def fixed(width: int) -> Width:
  """A width that is not searched."""
  return Width(((1.0, int(width)),))


def from_options(options: Sequence[Tuple[Any, int]],
                 sampled: bool = False) -> Width:
  """Builds a `Width`, merging equal widths.

  Args:
    options: `(coefficient, width)` pairs (widths may repeat).
    sampled: make the sampled form (`size`) instead of the channel mask;
      the coefficients must then be one-hot.

  Returns:
    The width; unless all widths are equal, its mask is a float32 [max]
    tensor (masked form) or its size an int32 scalar (sampled form).
  """
  merged: Dict[int, Any] = {}
  for coef, width in options:
    merged[width] = coef if width not in merged else merged[width] + coef
  if len(merged) == 1:
    return fixed(next(iter(merged)))
  if sampled:
    coefs = tf.stack([tf.cast(c, tf.float32) for c in merged.values()])
    # Widths are small integers, exact in float32; one-hot coefficients
    # pick exactly one of them.
    # reduce_sum of a product: three ops, where tensordot adds ~6 more.
    size = tf.reduce_sum(coefs * tf.constant(list(merged), tf.float32))
    return Width(tuple((c, w) for w, c in merged.items()),
                 size=tf.cast(tf.round(size), tf.int32))
  widest = max(merged)
  prefixes = np.stack([(np.arange(widest) < w).astype(np.float32)
                       for w in merged])
  coefs = tf.stack([tf.cast(c, tf.float32) for c in merged.values()])
  mask = tf.linalg.matvec(tf.constant(prefixes), coefs, transpose_a=True)
  return Width(tuple((c, w) for w, c in merged.items()), mask)


def map_widths(width: Width, fn: Callable[[int], int]) -> Width:
  """The width `fn(w)` for every option `w` (same coefficients and form)."""
  return from_options([(c, fn(w)) for c, w in width.options],
                      sampled=width.size is not None)


def narrow(value: Any, axes: Sequence[Optional[Width]]) -> Any:
  """`value` cut to the sampled size of each axis given a sampled width.

  Args:
    value: a variable (or a snapshot read of one) at the largest widths.
    axes: one entry per axis of `value`: a `Width`, or None for an axis that
      is not a channel width (kernel height, classes).

  Returns:
    `value` itself when no axis has a sampled size, else the prefix slice;
    its gradient reaches the variable zero-padded, as the masked form's
    gradient is zero beyond the sampled width.
  """
  sizes = [None if w is None else w.size for w in axes]
  if all(s is None for s in sizes):
    return value
  value = tf.convert_to_tensor(value)
  full = value.shape.as_list()
  end = tf.stack([tf.constant(n) if s is None else s
                  for n, s in zip(full, sizes)])
  # A strided slice, not `tf.slice`: the same values, but its gradient is one
  # StridedSliceGrad where Slice's computes the padding from the input's
  # shape in ~11 more ops (~2,800 of proxylessnas_search's graph, start-up).
  return tf.strided_slice(value, [0] * len(full), end, [1] * len(full))


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
  # One Unpack op instead of a strided slice (and three constants) per entry.
  return tf.unstack(tf.cast(oneof.mask, tf.float32), len(oneof.choices))


def weighted_choices(value: Any, path: str, sampled: bool = False) -> list:
  """`(coefficient, choice)` pairs of a plain value or a decision.

  Args:
    value: a plain value or a OneOf of values.
    path: its spec path, for error messages.
    sampled: the value is a width computed in the sampled form, which needs
      one-hot masks: a searched decision must be tagged `filters`.

  Raises:
    ValueError: for a sampled width decision tagged otherwise (op warm-up
      would give it a fractional mask).
  """
  if not isinstance(value, OneOf):
    return [(1.0, value)]
  index = selected_index(value, path)
  if index is not None:
    return [(1.0, value.choices[index])]
  if sampled and value.tag != schema.FILTERS:
    raise ValueError(
        f'{path}: a width decision tagged {value.tag!r} cannot be computed at '
        f'its sampled width (op warm-up averages op masks); tag it '
        f'{schema.FILTERS!r} or use the {MASKED!r} width form')
  return list(zip(mask_entries(value), value.choices))


def block_width(filters: Any, path: str, sampled: bool = False) -> Width:
  """The width of a block's `filters` (an int or a OneOf of ints)."""
  return from_options([(c, int(f))
                       for c, f in weighted_choices(filters, path, sampled)],
                      sampled)


def expanded_width(input_width: Width, expansion: Any, base: int,
                   path: str, sampled: bool = False) -> Width:
  """A bottleneck's expanded width, relative to its input width.

  docs/method.md section 1: for input choice i and multiplier j the expanded width is
  `scale_filters(in_width_i, mult_j, base)` with weight `m_in_i * m_exp_j`.

  Args:
    input_width: the layer's input width.
    expansion: a `FilterMultiplier` or a OneOf of them.
    base: rounding base of widths (`ConvTower.filters_base`).
    path: spec path of `expansion`.
    sampled: build the sampled form (see `from_options`).

  Returns:
    The expanded width.
  """
  options = []
  for c_in, w_in in input_width.options:
    for c_exp, mult in weighted_choices(expansion, path, sampled):
      if not isinstance(mult, specs.FilterMultiplier):
        raise ValueError(f'{path}: expected FilterMultiplier, got {mult!r}')
      coef = c_exp if isinstance(c_in, float) else c_in * c_exp
      options.append((coef, specs.scale_filters(w_in, mult.scale, base)))
  return from_options(options, sampled)
