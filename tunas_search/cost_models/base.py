"""The cost-model interface and the numpy / TensorFlow array back-ends it uses.

A cost model scores an architecture twice over: in Python from its indices
(`cost`, for reports and random search) and in-graph from a spec whose OneOfs
carry float32 tensor masks from the controller (`tf_cost`, for the reward).
Both share one implementation written against a tiny array interface
(`NUMPY_OPS`, `TFOps`), so they agree by construction for one-hot masks.
TensorFlow is imported lazily: the Python path never loads it.
"""

import abc
import dataclasses
from typing import Any, List, Optional, Sequence

import numpy as np

from tunas_search.space import architecture
from tunas_search.space.schema import OneOf


@dataclasses.dataclass(frozen=True)
class CostContext:
  """What a cost model may need to know besides the spec.

  Attributes:
    space_name: the search space the spec belongs to. For a reference net
      this is the space it lives in (`SearchSpace.pixel1_model` when set,
      e.g. 'proxylessnas_enlarged_search' for mobilenet_v2), else its own name
      or None; only models keyed by space (pixel1_latency) read it.
    image_size: input height and width in pixels.
    num_classes: classifier outputs (TuNAS uses 1001 on ImageNet).
    input_channels: channels of the input images.
    cost_model_file: the latency model file of the `measured` cost model
      (`bin/calibrate_latency.py`), or None.
  """
  space_name: Optional[str]
  image_size: int = 224
  num_classes: int = 1000
  input_channels: int = 3
  cost_model_file: Optional[str] = None

  def __post_init__(self):
    for name in ('image_size', 'num_classes', 'input_channels'):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'CostContext.{name} must be a positive int, got '
                         f'{value!r}')


class CostModel(abc.ABC):
  """A named, unit-carrying estimate of an architecture's cost.

  Attributes:
    name: registry name, also the summary key suffix (`cost/<name>`).
    unit: unit of the returned numbers ('ms', 'madds', 'params').
  """
  name: str = ''
  unit: str = ''
  # Whether the model reads a file named by `CostContext.cost_model_file`.
  needs_file: bool = False
  # Whether a cost is a sum of per-layer terms, each depending only on its
  # layer's input width and resolution and its layer's own decisions (plus
  # a constant): `ranges.cost_range` is then exact for fixed widths.
  additive: bool = False

  @abc.abstractmethod
  def applies(self, space_name: str, spec: Any) -> bool:
    """Whether this model can score architectures of `spec`."""

  def cost(self, spec: Any, indices: Sequence[int],
           context: CostContext) -> float:
    """Cost of one architecture (numpy, no TensorFlow).

    Args:
      spec: the model spec (without masks).
      indices: one choice index per decision of `spec`.
      context: image size, classes, space name.

    Returns:
      The cost as a Python float, in `unit`.

    Raises:
      tunas_search.space.architecture.ArchitectureError: if `indices` do not fit.
      ValueError, TypeError: if the model does not apply to `spec`.
    """
    masked = architecture.with_indices(spec, indices)
    return float(self._evaluate(masked, context, NUMPY_OPS))

  def tf_cost(self, masked_spec: Any, context: CostContext):
    """In-graph cost from a spec whose OneOfs carry masks.

    Pure TensorFlow ops (no py_function), so it runs on TPU inside the
    training step. For one-hot masks it equals `cost` up to float32 rounding;
    for other masks (op warm-up) it is the mask-weighted estimate.

    Args:
      masked_spec: spec with a float32 [num_choices] mask (tensor or numpy)
        on every OneOf.
      context: image size, classes, space name.

    Returns:
      A scalar float32 tensor, in `unit`.
    """
    import tensorflow as tf  # Lazy: the numpy path must not load TF.
    value = self._evaluate(masked_spec, context, TFOps())
    return tf.reshape(tf.cast(value, tf.float32), [])

  @abc.abstractmethod
  def _evaluate(self, masked_spec: Any, context: CostContext, ops: 'NumpyOps'):
    """Cost of a masked spec with the array back-end `ops`."""


def mask_of(oneof: OneOf, ops: 'NumpyOps', path: str = ''):
  """The mask of `oneof` as a vector of `ops`, checked against its choices.

  Raises:
    ValueError: if the OneOf has no mask or a mask of the wrong length.
  """
  if oneof.mask is None:
    raise ValueError(
        f'OneOf {path or oneof.choices!r} has no mask; attach masks with '
        'architecture.with_indices or schema.with_masks')
  mask = ops.vector(oneof.mask)
  n = ops.length(mask)
  if n is not None and n != len(oneof.choices):
    raise ValueError(f'OneOf {path or oneof.choices!r} has {len(oneof.choices)}'
                     f' choices but a mask of length {n}')
  return mask


class NumpyOps:
  """Array operations in float64 numpy: the Python (`cost`) path."""

  def vector(self, mask: Any) -> np.ndarray:
    return np.asarray(mask, dtype=np.float64).reshape(-1)

  def length(self, vector: Any) -> int:
    return int(np.shape(vector)[0])

  def ones(self, n: int) -> np.ndarray:
    return np.ones([n], dtype=np.float64)

  def outer(self, a: Any, b: Any) -> Any:
    """Flattened outer product, `a` major: numpy's kron of two vectors."""
    return np.reshape(a[:, None] * b[None, :], [-1])

  def concat(self, parts: Sequence[Any]) -> Any:
    return np.concatenate(parts)

  def dot(self, weights: Any, values: np.ndarray) -> Any:
    """`weights . values` for a static numpy `values`."""
    return np.dot(weights, values)

  def matvec(self, weights: Any, matrix: np.ndarray) -> Any:
    """`weights @ matrix` for a static numpy `matrix` of shape [n, k]."""
    return weights @ matrix

  def unstack(self, vector: Any) -> List[Any]:
    """The entries of a vector as a list of scalars."""
    return list(vector)


NUMPY_OPS = NumpyOps()


def _is_static(x: Any) -> bool:
  return isinstance(x, (np.ndarray, np.generic, float, int))


class TFOps(NumpyOps):
  """The same operations in float32 TensorFlow: the in-graph path.

  Values that do not depend on a mask stay numpy constants and are folded in
  Python, so fixed parts of a spec add no graph ops.
  """

  def __init__(self):
    import tensorflow as tf  # Lazy: see module docstring.
    self._tf = tf

  def vector(self, mask: Any) -> Any:
    if _is_static(mask):
      return np.asarray(mask, dtype=np.float32).reshape(-1)
    tf = self._tf
    mask = tf.cast(mask, tf.float32)  # No op when already float32.
    return mask if mask.shape.rank == 1 else tf.reshape(mask, [-1])

  def length(self, vector: Any) -> int:
    if _is_static(vector):
      return int(np.shape(vector)[0])
    return vector.shape[0]  # None when unknown statically.

  def ones(self, n: int) -> np.ndarray:
    return np.ones([n], dtype=np.float32)

  def outer(self, a: Any, b: Any) -> Any:
    if _is_static(a) and _is_static(b):
      return np.reshape(np.asarray(a)[:, None] * np.asarray(b)[None, :], [-1])
    tf = self._tf
    return tf.reshape(tf.einsum('i,j->ij', tf.cast(a, tf.float32),
                                tf.cast(b, tf.float32)), [-1])

  def concat(self, parts: Sequence[Any]) -> Any:
    if all(_is_static(p) for p in parts):
      return np.concatenate([np.asarray(p, np.float32) for p in parts])
    tf = self._tf
    return tf.concat([tf.convert_to_tensor(p, tf.float32) for p in parts], 0)

  def dot(self, weights: Any, values: np.ndarray) -> Any:
    if _is_static(weights):
      return np.dot(weights, values)
    # reduce_sum of a product: two ops, where tensordot adds ~10 reshapes.
    tf = self._tf
    return tf.reduce_sum(weights * tf.constant(values, tf.float32))

  def matvec(self, weights: Any, matrix: np.ndarray) -> Any:
    if _is_static(weights):
      return np.asarray(weights) @ matrix.astype(np.float32)
    tf = self._tf
    return tf.linalg.matvec(tf.constant(matrix, tf.float32), weights,
                            transpose_a=True)

  def unstack(self, vector: Any) -> List[Any]:
    if _is_static(vector):
      return list(vector)
    return self._tf.unstack(vector)
