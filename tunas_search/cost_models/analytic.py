"""Exact multiply-adds and trainable-parameter counts of any ConvTower spec.

Counting rules (kept in step with the builder, see specs.py):
  * params: conv / depthwise kernels, BN gamma and beta (not the moving
    statistics), biases (squeeze-excite convs; a Conv without BN), and the
    classifier (dense kernel + bias on globally pooled features).
  * madds: k*k*cin*cout*Hout*Wout per conv, k*k*c*Hout*Wout per depthwise
    conv, the two 1x1 squeeze-excite convs on a 1x1 map, and the classifier.
    Activations, BN, pooling and additions are not counted. SAME padding:
    Hout = ceil(H / stride).

Widths are carried as small distributions (mask weights over possible
values), so that one walk serves both a fixed architecture (one-hot numpy
masks, exact) and the supernet (float32 tensor masks, in-graph). Products of
independent widths use mask-weighted means; the rounding of expanded and
squeeze-excite widths is evaluated per (input width, multiplier) pair. For
one-hot masks every quantity is therefore exact.
"""

import dataclasses
import math
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from tunas_search.cost_models import base
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, ConvTower, Conv,
                                      DepthwiseBottleneck, DetectionEndpoint,
                                      FilterMultiplier, GlobalAveragePool,
                                      Residual, SeparableConv,
                                      UniversalInvertedBottleneck, Zero,
                                      make_divisible, scale_filters)

# SE hidden width = make_divisible(0.25 * expanded width) (docs/method.md section 2).
SE_RATIO = 0.25


@dataclasses.dataclass(frozen=True)
class Dist:
  """A quantity that takes `values[j]` with weight `weights[j]`.

  Attributes:
    weights: vector [n]: numpy, or a float32 tensor from controller masks.
    values: static float64 numpy vector [n].
  """
  weights: Any
  values: np.ndarray

  def mean(self, ops: base.NumpyOps, fn: Callable = None) -> Any:
    """The weighted sum of `values` (or of `fn(values)`)."""
    return ops.dot(self.weights, self.values if fn is None else fn(self.values))

  def means(self, ops: base.NumpyOps, *columns: np.ndarray) -> List[Any]:
    """Weighted sums of several value vectors [n] at once (one matvec)."""
    return ops.unstack(ops.matvec(self.weights, np.stack(columns, axis=1)))


@dataclasses.dataclass(frozen=True)
class _State:
  """The tensor flowing between layers: width distribution and spatial size."""
  width: Dist
  size: int


class Terms:
  """Per-kind sums of (madds, memory traffic, count) of the layers that run.

  The features of a latency model (`cost_models.measured`): a kind is an op
  type with its kernel size (`conv3x3`, `depthwise5x5`, `expand1x1`, `se`,
  ...). Memory traffic counts the elements of a layer's input, output and
  weights. Every choice of a searched layer adds its terms times its mask
  entry, so the sums are exact for one-hot masks and in-graph for tensors.
  """

  def __init__(self):
    self.sums = {}

  def add(self, kind: str, madds: Any, memory: Any, count: Any = 1.0,
          weight: Any = None) -> None:
    values = [madds, memory, count]
    if weight is not None:
      values = [weight * v for v in values]
    old = self.sums.get(kind)
    self.sums[kind] = values if old is None else [
        a + b for a, b in zip(old, values)]

  def merge(self, other: 'Terms', weight: Any) -> None:
    for kind, values in other.sums.items():
      self.add(kind, *values, weight=weight)


class _NoTerms(Terms):
  """Collects nothing: `count` needs no features."""

  def add(self, *args, **kwargs) -> None:
    del args, kwargs

  def merge(self, other: 'Terms', weight: Any) -> None:
    del other, weight


def _per_kernel(terms: Terms, kind: str, kernels: 'Dist', madds: Callable,
                memory: Callable) -> None:
  """Adds `kind<k>x<k>` terms for each kernel size k, weighted by its mask."""
  for j, k in enumerate(kernels.values):
    k = int(k)
    terms.add(f'{kind}{k}x{k}', madds(k), memory(k),
              weight=kernels.weights[j])


def _fixed(value: float, ops: base.NumpyOps) -> Dist:
  return Dist(ops.ones(1), np.array([float(value)]))


def _dist(node: Any, ops: base.NumpyOps, convert: Callable = float) -> Dist:
  """A scalar field (int, bool, FilterMultiplier) or a OneOf of them."""
  if isinstance(node, OneOf):
    return Dist(base.mask_of(node, ops),
                np.array([float(convert(c)) for c in node.choices]))
  return _fixed(convert(node), ops)


def _merge(dist: Dist, ops: base.NumpyOps) -> Dist:
  """Sums the weights of equal values, so mixtures do not keep growing."""
  unique = np.unique(dist.values)
  if len(unique) == len(dist.values):
    return dist
  merge = (dist.values[:, None] == unique[None, :]).astype(np.float64)
  return Dist(ops.matvec(dist.weights, merge), unique)


def _out_size(size: int, strides: int) -> int:
  if not isinstance(strides, int) or isinstance(strides, bool):
    raise TypeError(f'strides must be an int, got {strides!r}')
  return math.ceil(size / strides)  # SAME padding.


def _square(v: np.ndarray) -> np.ndarray:
  return v * v


def _multiplier(choice: Any) -> float:
  if not isinstance(choice, FilterMultiplier):
    raise TypeError(f'expansion_filters must be a FilterMultiplier (or a '
                    f'OneOf of them), got {choice!r}')
  return choice.scale


def _conv(layer: Conv, x: _State, out: Dist, ops, base_width: int,
          terms: Terms):
  del base_width  # Unused: no rounding in a plain conv.
  size = _out_size(x.size, layer.strides)
  kernels = _dist(layer.kernel_size, ops)
  cin, cout = x.width.mean(ops), out.mean(ops)
  weights = kernels.mean(ops, _square) * cin * cout
  norm = (2.0 if layer.use_batch_norm else 1.0) * cout
  _per_kernel(terms, 'conv', kernels,
              lambda k: k * k * cin * cout * size * size,
              lambda k: (cin * x.size * x.size + cout * size * size +
                         k * k * cin * cout))
  return _State(out, size), weights + norm, weights * size * size


def _separable(layer: SeparableConv, x: _State, out: Dist, ops,
               base_width: int, terms: Terms):
  del base_width  # Unused: no rounding.
  size = _out_size(x.size, layer.strides)
  cin, cout = x.width.mean(ops), out.mean(ops)
  kernels = _dist(layer.kernel_size, ops)
  depthwise = kernels.mean(ops, _square) * cin
  pointwise = cin * cout
  _per_kernel(terms, 'depthwise', kernels,
              lambda k: k * k * cin * size * size,
              lambda k: cin * (x.size * x.size + size * size + k * k))
  terms.add('pointwise1x1', pointwise * size * size,
            (cin + cout) * size * size + pointwise)
  params = depthwise + 2.0 * cin + pointwise + 2.0 * cout
  return _State(out, size), params, (depthwise + pointwise) * size * size


def _expanded(x: Dist, multipliers: Dist, ops,
              base_width: int) -> Tuple[Dist, np.ndarray]:
  """Joint (input width, expanded width) over input x multiplier pairs.

  Returns:
    (Dist of expanded widths, the matching input widths [n]).
  """
  cin = np.repeat(x.values, len(multipliers.values))
  scales = np.tile(multipliers.values, len(x.values))
  expanded = np.array([float(scale_filters(int(c), s, base_width))
                       for c, s in zip(cin, scales)])
  return Dist(ops.outer(x.weights, multipliers.weights), expanded), cin


def _se_cost(expanded: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """(params, madds) of squeeze-excite per expanded width (docs/method.md section 2)."""
  hidden = np.array([float(make_divisible(SE_RATIO * e)) for e in expanded])
  return 2 * expanded * hidden + hidden + expanded, 2 * expanded * hidden


def _bottleneck(layer: DepthwiseBottleneck, x: _State, out: Dist, ops,
                base_width: int, terms: Terms):
  size = _out_size(x.size, layer.strides)
  mults = _dist(layer.expansion_filters, ops, _multiplier)
  exp, cin = _expanded(x.width, mults, ops, base_width)
  se_params, se_madds = _se_cost(exp.values)
  # Everything that depends on the (input, expanded) pair, in one matvec.
  e, expand, se_p, se_m = exp.means(ops, exp.values, exp.values * cin,
                                    se_params, se_madds)
  cout = out.mean(ops)
  kernels = _dist(layer.kernel_size, ops)
  depthwise = kernels.mean(ops, _square) * e
  se_on = _dist(layer.use_squeeze_and_excite, ops).mean(ops)
  project = e * cout
  cin_mean, area_in, area = x.width.mean(ops), x.size * x.size, size * size
  terms.add('expand1x1', expand * area_in, (cin_mean + e) * area_in + expand)
  _per_kernel(terms, 'depthwise', kernels, lambda k: k * k * e * area,
              lambda k: e * (area_in + area + k * k))
  # Squeeze-excite reads the map twice (pool, scale) and writes it once.
  terms.add('se', se_m, 3.0 * e * area + se_p, weight=se_on)
  terms.add('project1x1', project * area, (e + cout) * area + project)
  params = (expand + 4.0 * e + depthwise + se_on * se_p + project +
            2.0 * cout)  # 4e: the BNs after the expand and depthwise convs.
  madds = (expand * x.size * x.size + (depthwise + project) * size * size +
           se_on * se_m)
  return _State(out, size), params, madds


def _uib_depthwise(terms: Terms, kernels: Dist, channels: Any, area_in: int,
                   area: int, ops) -> Tuple[Any, Any]:
  """(params, madds) of a UIB's optional depthwise conv and its BN.

  Kernel size 0 (`NO_DEPTHWISE`) is no conv; each other size adds its
  `depthwise<k>x<k>` terms, weighted by its mask entry.
  """
  present = kernels.mean(ops, lambda v: (v > 0).astype(np.float64))
  squares = kernels.mean(ops, _square)
  for j, k in enumerate(kernels.values):
    if k > 0:
      k = int(k)
      terms.add(f'depthwise{k}x{k}', k * k * channels * area,
                channels * (area_in + area + k * k),
                weight=kernels.weights[j])
  return squares * channels + 2.0 * present * channels, (
      squares * channels * area)


def _uib(layer: UniversalInvertedBottleneck, x: _State, out: Dist, ops,
         base_width: int, terms: Terms):
  """docs/mobilenet_v4.md: start DW, expand, middle DW, project; BN after
  each, no biases. The middle DW carries the stride, or the start DW in a
  block without a middle one, whose expansion then runs at the output's
  resolution (`stride_on_start`)."""
  size = _out_size(x.size, layer.strides)
  mults = _dist(layer.expansion_filters, ops, _multiplier)
  exp, cin = _expanded(x.width, mults, ops, base_width)
  e, expand = exp.means(ops, exp.values, exp.values * cin)
  cin_mean, cout = x.width.mean(ops), out.mean(ops)
  area_in, area = x.size * x.size, size * size
  # The resolution between the two depthwise convs: the expansion's.
  area_mid = area if layer.stride_on_start else area_in
  start_p, start_m = _uib_depthwise(
      terms, _dist(layer.start_kernel_size, ops), cin_mean, area_in,
      area_mid, ops)
  middle_p, middle_m = _uib_depthwise(
      terms, _dist(layer.middle_kernel_size, ops), e, area_mid, area, ops)
  project = e * cout
  terms.add('expand1x1', expand * area_mid,
            (cin_mean + e) * area_mid + expand)
  terms.add('project1x1', project * area, (e + cout) * area + project)
  params = start_p + expand + 2.0 * e + middle_p + project + 2.0 * cout
  madds = start_m + expand * area_mid + middle_m + project * area
  return _State(out, size), params, madds


def _weighted_sum(mask: Any, values: List[Any]) -> Any:
  """sum_i mask[i] * values[i], skipping the free choices (Zero, ...)."""
  terms = [mask[i] * v for i, v in enumerate(values)
           if not (isinstance(v, float) and v == 0.0)]
  return sum(terms[1:], terms[0]) if terms else 0.0


def _choice(oneof: OneOf, x: _State, out: Dist, ops, base_width: int,
            terms: Terms):
  """A OneOf over layers: mask-weighted costs, mixture of output widths."""
  mask = base.mask_of(oneof, ops)
  results = []
  for i, c in enumerate(oneof.choices):
    sub = _NoTerms() if isinstance(terms, _NoTerms) else Terms()
    results.append(_layer(c, x, out, ops, base_width, sub))
    terms.merge(sub, mask[i])
  sizes = {r[0].size for r in results}
  if len(sizes) != 1:
    raise ValueError(f'the choices of {oneof.choices!r} give different '
                     f'output resolutions {sorted(sizes)}')
  width = Dist(ops.concat([mask[i] * r[0].width.weights
                           for i, r in enumerate(results)]),
               np.concatenate([r[0].width.values for r in results]))
  params = _weighted_sum(mask, [r[1] for r in results])
  madds = _weighted_sum(mask, [r[2] for r in results])
  return _State(_merge(width, ops), sizes.pop()), params, madds


def _layer(layer: Any, x: _State, out: Dist, ops, base_width: int,
           terms: Terms):
  """(output state, params, madds) of one layer given its input state."""
  if isinstance(layer, OneOf):
    return _choice(layer, x, out, ops, base_width, terms)
  if isinstance(layer, Residual):
    return _layer(layer.layer, x, out, ops, base_width, terms)
  if isinstance(layer, (Zero, Activation, DetectionEndpoint)):
    return x, 0.0, 0.0
  if isinstance(layer, GlobalAveragePool):
    terms.add('pool', 0.0, x.width.mean(ops) * x.size * x.size)
    return _State(x.width, 1), 0.0, 0.0
  handler = _HANDLERS.get(type(layer))
  if handler is None:
    raise TypeError(f'no madds/params rule for layer type '
                    f'{type(layer).__name__}')
  return handler(layer, x, out, ops, base_width, terms)


_HANDLERS = {Conv: _conv, SeparableConv: _separable,
             DepthwiseBottleneck: _bottleneck,
             UniversalInvertedBottleneck: _uib}


def count(masked_spec: ConvTower, context: base.CostContext,
          ops: base.NumpyOps = base.NUMPY_OPS,
          terms: Optional[Terms] = None) -> Tuple[Any, Any]:
  """(params, madds) of a masked ConvTower, classifier included.

  Args:
    masked_spec: a ConvTower with a mask on every OneOf.
    context: image size, number of classes and input channels.
    ops: `base.NUMPY_OPS` or `base.TFOps()`.
    terms: when given, also receives every layer's per-kind terms.

  Returns:
    (params, madds): numpy float64 scalars, or float32 tensors when a mask
    is a tensor.

  Raises:
    TypeError: if the spec holds a record without a counting rule.
  """
  if not isinstance(masked_spec, ConvTower):
    raise TypeError(f'madds/params need a ConvTower spec, got '
                    f'{type(masked_spec).__name__}')
  terms = _NoTerms() if terms is None else terms
  x = _State(_fixed(context.input_channels, ops), context.image_size)
  params, madds = 0.0, 0.0
  for block in masked_spec.blocks:
    out = _dist(block.filters, ops)
    for layer in block.layers:
      x, p, m = _layer(layer, x, out, ops, masked_spec.filters_base, terms)
      params, madds = params + p, madds + m
  # Classifier: dense (== 1x1 conv) with bias on pooled features.
  features = x.width.mean(ops)
  classifier = features * context.num_classes
  terms.add('dense', classifier, features + context.num_classes + classifier)
  params = params + classifier + context.num_classes
  madds = madds + classifier
  return params, madds


# The last in-graph count: (masked spec, context, graph, (params, madds)).
# `Params` and `Madds` on the same masked spec in one graph share its ops.
_last_graph_count = None


def _cached_graph_count(masked_spec, context, ops):
  global _last_graph_count
  import tensorflow as tf  # Lazy: only the in-graph path gets here.
  if tf.executing_eagerly():
    return count(masked_spec, context, ops)
  graph = tf.compat.v1.get_default_graph()
  last = _last_graph_count
  if (last is None or last[0] is not masked_spec or last[1] != context or
      last[2] is not graph):
    last = (masked_spec, context, graph, count(masked_spec, context, ops))
    _last_graph_count = last
  return last[3]


class _Analytic(base.CostModel):
  """Shared part of `Madds` and `Params`: they apply to any ConvTower."""
  _which = 0
  additive = True  # `count` sums its layers' counts.

  def applies(self, space_name: str, spec: Any) -> bool:
    del space_name  # Any ConvTower of specs records can be counted.
    return isinstance(spec, ConvTower)

  def _evaluate(self, masked_spec, context, ops):
    if isinstance(ops, base.TFOps):
      return _cached_graph_count(masked_spec, context, ops)[self._which]
    return count(masked_spec, context, ops)[self._which]


class Params(_Analytic):
  """Trainable parameters of the stand-alone network."""
  name = 'params'
  unit = 'params'
  _which = 0


class Madds(_Analytic):
  """Multiply-adds of one forward pass on one image."""
  name = 'madds'
  unit = 'madds'
  _which = 1
