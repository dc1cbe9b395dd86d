"""The prefix slice of a sampled width, with a gradient of one Pad.

TensorFlow's Slice gradient computes the padding from the input's rank and
shape and the begin at run time (~12 ops per slice, ~400 slices in
`mobilenet_v3_like_search`); a prefix slice begins at 0 and has a static input
shape, so its padding is `[0, full - size]` on each axis, and slices of one
size share it (docs/DESIGN.md, "Masks").
"""

import weakref
from typing import Any, Callable, Tuple

import tensorflow as tf

from tunas_search.tf_internals import graph as graph_lib

PREFIX_SLICE_GRADIENT = 'TunasNarrow'
# graph -> {(key, id of the control-flow context built in): tensor}: the
# size vectors of prefix slices and their gradients' paddings.
_SHARED = weakref.WeakKeyDictionary()


def shared(key: Tuple[Any, ...], make: Callable[[], tf.Tensor]) -> tf.Tensor:
  """`make()`, built once per graph, key and control-flow context."""
  graph = tf.compat.v1.get_default_graph()
  cache = _SHARED.setdefault(graph, {})
  key = (key, graph_lib.control_flow_context_id(graph))
  if key not in cache:
    cache[key] = make()
  return cache[key]


def prefix_slice(value: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
  """`value[:size[0], :size[1], ...]`, whose gradient is one Pad.

  Args:
    value: a tensor with a static shape.
    size: int32 [rank], every axis's size (the full one where nothing is
      cut); build it with `shared`, so slices of one size share it and their
      gradients share the padding.
  """
  graph = tf.compat.v1.get_default_graph()
  with graph.gradient_override_map({'Slice': PREFIX_SLICE_GRADIENT}):
    return tf.slice(value, [0] * value.shape.rank, size)


@tf.RegisterGradient(PREFIX_SLICE_GRADIENT)
def _prefix_slice_grad(op, grad):
  """The slice's gradient zero-padded to the sliced tensor's shape."""
  size = op.inputs[2]
  full = op.inputs[0].shape.as_list()
  paddings = shared(('padding', size.name, tuple(full)), lambda: tf.stack(
      [tf.zeros([len(full)], size.dtype),
       tf.constant(full, size.dtype) - size], axis=1))
  return tf.pad(grad, paddings), None, None
