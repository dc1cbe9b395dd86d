"""TuNAS's linear model of simulated Pixel-1 latency (docs/cost_models.md).

cost_ms = features . kernel + bias, one (kernel, bias) per search space, with
the coefficients of Bender et al. 2020 shipped in
`tunas_pixel1_cost_models.npz` (Apache-2.0, see README.md next to it). The
feature vector is built by walking the masked spec generically: per layer, the
Kronecker product of its block's width mask, the previous width mask and the
layer's own features (docs/cost_models.md).
"""

import dataclasses
import functools
import os
from typing import Any, List, Optional, Tuple

import numpy as np

from tunas_search.space import schema
from tunas_search.cost_models import base
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import ConvTower

DATA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         'tunas_pixel1_cost_models.npz')

_SCALARS = (int, float, bool, str, bytes, type(None))


@functools.lru_cache(maxsize=None)
def load_models(path: str = DATA_FILE) -> dict:
  """{space name: (kernel float32 [N], bias float)} from the shipped data."""
  with np.load(path) as data:
    names = sorted({key.split('/')[0] for key in data.files})
    return {n: (data[f'{n}/kernel'].astype(np.float32),
                float(data[f'{n}/bias'][0])) for n in names}


def model_names() -> List[str]:
  """Search spaces that have a Pixel-1 model."""
  return sorted(load_models())


@dataclasses.dataclass(frozen=True)
class Segment:
  """One layer's slice of the feature vector (docs/cost_models.md).

  Attributes:
    block: block index.
    layer: layer index within the block.
    outputs: number of the block's width choices (O), or None if fixed int.
    inputs: number of the previous width choices (I), or None if absent.
    layer_size: length of the layer's own features (L).
    offset: first feature position.
    size: O * I * L (absent factors count 1).
  """
  block: int
  layer: int
  outputs: Optional[int]
  inputs: Optional[int]
  layer_size: int
  offset: int
  size: int


def _num_layer_features(node: Any) -> int:
  """|phi(node)| without masks (docs/cost_models.md)."""
  if isinstance(node, OneOf):
    return sum(_num_layer_features(c) for c in node.choices)
  if isinstance(node, _SCALARS):
    return 1
  return int(np.prod([_num_layer_features(c)
                      for _, c in schema.children(node)], dtype=np.int64))


def _has_decision(node: Any) -> bool:
  if isinstance(node, OneOf):
    return True
  if isinstance(node, _SCALARS):
    return False
  return any(_has_decision(c) for _, c in schema.children(node))


def _layer_features(node: Any, ops: base.NumpyOps, path: str) -> Any:
  """phi(node): OneOf -> masked concatenation, records -> Kronecker product."""
  if isinstance(node, OneOf):
    mask = base.mask_of(node, ops, path)
    if not any(_has_decision(c) for c in node.choices):
      return mask  # Every choice has phi = [1]: the features are the mask.
    return ops.concat([
        mask[i] * _layer_features(c, ops, f'{path}/choices/{i}')
        for i, c in enumerate(node.choices)])
  result = ops.ones(1)
  if isinstance(node, _SCALARS):
    return result
  for seg, child in schema.children(node):
    if _has_decision(child):
      result = _kron(result, _layer_features(child, ops, f'{path}/{seg}'), ops)
  return result


def _kron(a: Any, b: Any, ops: base.NumpyOps) -> Any:
  """Kronecker product of vectors; `None` is an absent operand."""
  if a is None:
    return b
  if b is None:
    return a
  return ops.outer(a, b)


def _check_tower(spec: Any) -> None:
  if not isinstance(spec, ConvTower):
    raise TypeError(f'the Pixel-1 model needs a ConvTower spec, got '
                    f'{type(spec).__name__}')


def segments(spec: ConvTower) -> List[Segment]:
  """The non-dropped layer segments of `spec`'s feature vector, in order.

  A segment whose length is <= 1 is dropped (docs/cost_models.md,
  "Assembly"), e.g. every fixed layer of a block with a fixed width.
  """
  _check_tower(spec)
  out, offset, prev = [], 0, None
  for b, block in enumerate(spec.blocks):
    here = (len(block.filters.choices) if isinstance(block.filters, OneOf)
            else None)
    for l, layer in enumerate(block.layers):
      layer_size = _num_layer_features(layer)
      size = (here or 1) * (prev or 1) * layer_size
      if size > 1:
        out.append(Segment(b, l, here, prev, layer_size, offset, size))
        offset += size
      prev = here
  return out


def num_features(spec: ConvTower) -> int:
  """Length of the feature vector (1 if every segment is dropped)."""
  segs = segments(spec)
  return segs[-1].offset + segs[-1].size if segs else 1


def features(masked_spec: ConvTower, ops: base.NumpyOps = base.NUMPY_OPS):
  """The feature vector x of a masked spec (docs/cost_models.md).

  Args:
    masked_spec: a ConvTower with a mask on every OneOf.
    ops: `base.NUMPY_OPS` (float64 numpy) or `base.TFOps()` (float32 tensor).

  Returns:
    Vector [num_features(masked_spec)]; 0/1 for one-hot masks.
  """
  kept = {(s.block, s.layer) for s in segments(masked_spec)}
  parts, prev = [], None
  for b, block in enumerate(masked_spec.blocks):
    here = (base.mask_of(block.filters, ops, f'blocks/{b}/filters')
            if isinstance(block.filters, OneOf) else None)
    for l, layer in enumerate(block.layers):
      if (b, l) in kept:
        phi = _layer_features(layer, ops, f'blocks/{b}/layers/{l}')
        parts.append(_kron(_kron(here, prev, ops), phi, ops))
      prev = here
  return ops.concat(parts) if parts else ops.ones(1)


class Pixel1Latency(base.CostModel):
  """Simulated Pixel-1 latency in ms (TuNAS, Bender et al. 2020)."""
  name = 'pixel1_latency'
  unit = 'ms'

  def applies(self, space_name: str, spec: Any) -> bool:
    if space_name not in load_models() or not isinstance(spec, ConvTower):
      return False
    return num_features(spec) == len(load_models()[space_name][0])

  def _model(self, context: base.CostContext,
             spec: ConvTower) -> Tuple[np.ndarray, float]:
    models = load_models()
    if context.space_name not in models:
      raise ValueError(
          f'no Pixel-1 latency model for search space '
          f'{context.space_name!r}; valid: {", ".join(sorted(models))}')
    kernel, bias = models[context.space_name]
    n = num_features(spec)
    if n != len(kernel):
      raise ValueError(
          f'the spec gives {n} Pixel-1 features but the '
          f'{context.space_name!r} model has {len(kernel)}; the spec is not '
          f'that search space (docs/cost_models.md)')
    return kernel, bias

  def _evaluate(self, masked_spec, context, ops):
    kernel, bias = self._model(context, masked_spec)
    x = features(masked_spec, ops)
    # The numpy path accumulates in float64; the original used float32, which
    # differs by ~1e-5 ms (docs/cost_models.md).
    return ops.dot(x, kernel) + bias
