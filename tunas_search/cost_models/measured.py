"""A latency model fitted to measurements on the user's own device.

The model is linear in per-kind layer features that the graph can compute
from the controller's masks (`analytic.Terms`): for every op kind with its
kernel size (conv3x3, expand1x1, depthwise5x5, se, project1x1, dense, ...)
the kind's multiply-adds, its memory traffic (elements of inputs, outputs and
weights) and how many such layers run. A few dozen coefficients describe a
device, so a few hundred measured networks fit any space, including the
width-searched ones (the idea of per-kernel predictors follows nn-Meter,
Zhang et al. 2021, which predicts latency from per-kernel FLOPs and memory
access; the fit here is one non-negative least-squares over all kinds).

`bin/calibrate_latency.py` measures and fits; `--cost_model=measured
--cost_model_file=latency_model.json` evaluates the fit everywhere a cost
model is used. A model is refused for another search space, image size or
number of input channels (`LatencyModel.check`).
"""

import dataclasses
import json
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from tunas_search.space import architecture
from tunas_search.cost_models import analytic
from tunas_search.cost_models import base
from tunas_search.space.specs import ConvTower

QUANTITIES = ('madds', 'memory', 'count')
FORMAT = 'tunas_search.latency_model.v1'


class LatencyModelError(ValueError):
  """A latency model file that is unreadable or made for something else."""


def feature_names(spec: ConvTower, context: base.CostContext) -> List[str]:
  """`<kind>/<quantity>` for every layer kind the space can run, sorted."""
  # Every choice of every decision adds its terms (weighted by its mask
  # entry), so any architecture of the space names every kind.
  masked = architecture.with_indices(spec, architecture.largest(spec))
  terms = analytic.Terms()
  analytic.count(masked, context, base.NUMPY_OPS, terms)
  return [f'{kind}/{q}' for kind in sorted(terms.sums) for q in QUANTITIES]


def features(masked_spec: ConvTower, context: base.CostContext,
             names: Sequence[str],
             ops: base.NumpyOps = base.NUMPY_OPS) -> List[Any]:
  """The values of `names` for a masked spec (0 for kinds it lacks).

  Returns:
    Python/numpy floats, or float32 tensors when a mask is a tensor.
  """
  terms = analytic.Terms()
  analytic.count(masked_spec, context, ops, terms)
  values = []
  for name in names:
    kind, quantity = name.rsplit('/', 1)
    sums = terms.sums.get(kind)
    values.append(0.0 if sums is None else sums[QUANTITIES.index(quantity)])
  return values


def nonnegative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """min ||a x - b|| subject to x >= 0 (Lawson and Hanson 1974, ch. 23).

  Non-negative coefficients keep the model physical (no layer makes a
  network faster), which is what lets it extrapolate to unmeasured widths.
  """
  m, n = a.shape
  del m
  x = np.zeros(n)
  passive = np.zeros(n, dtype=bool)
  tolerance = 1e-10 * max(1.0, float(np.abs(a).max()))
  for _ in range(3 * n):
    gradient = a.T @ (b - a @ x)
    candidates = np.where(passive, -np.inf, gradient)
    if passive.all() or candidates.max() <= tolerance:
      break
    passive[int(np.argmax(candidates))] = True
    while True:
      z = np.zeros(n)
      z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
      if (z[passive] > 0).all():
        x = z
        break
      blocked = passive & (z <= 0)
      alpha = float(np.min(x[blocked] / (x[blocked] - z[blocked])))
      x = x + alpha * (z - x)
      passive &= x > tolerance
      x[~passive] = 0.0
  return x


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
  """Kendall's rank correlation (tau-a; measured latencies have no ties)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  n = len(a)
  if n < 2:
    raise ValueError('Kendall tau needs at least two points')
  da = np.sign(a[:, None] - a[None, :])
  db = np.sign(b[:, None] - b[None, :])
  return float((da * db)[np.triu_indices(n, 1)].sum() / (n * (n - 1) / 2))


def error_report(predicted: Sequence[float],
                 measured: Sequence[float]) -> Dict[str, float]:
  """Mean absolute percentage error, shares within +-5% / +-10%, tau."""
  predicted = np.asarray(predicted, np.float64)
  measured = np.asarray(measured, np.float64)
  relative = np.abs(predicted - measured) / measured
  return {'count': int(len(measured)),
          'mape_percent': float(100.0 * relative.mean()),
          'within_5_percent': float((relative <= 0.05).mean()),
          'within_10_percent': float((relative <= 0.10).mean()),
          'kendall_tau': kendall_tau(predicted, measured)}


@dataclasses.dataclass(frozen=True)
class LatencyModel:
  """A fitted latency model and what it was fitted for.

  latency_ms = intercept_ms + sum_i coefficients[i] * features[i], for
  models of `precision` (float32, or int8 when calibrated with
  quantize=int8).
  """
  search_space: str
  image_size: int
  input_channels: int
  num_classes: int
  feature_names: List[str]
  coefficients: List[float]
  intercept_ms: float
  device: Dict[str, Any] = dataclasses.field(default_factory=dict)
  heldout: Dict[str, float] = dataclasses.field(default_factory=dict)
  fitted_on: int = 0
  format: str = FORMAT
  # What the timed models computed in (`config.export.PRECISIONS`): float32,
  # or int8 for a calibration with quantize=int8. Files written before
  # quantized calibrations were float32.
  precision: str = 'float32'

  def predict(self, values: Sequence[Any]) -> Any:
    """Latency in ms from `features(...)` in `feature_names` order."""
    total = self.intercept_ms
    for c, v in zip(self.coefficients, values):
      if c:
        total = total + c * v
    return total

  def check(self, space_name: Optional[str],
            context: base.CostContext) -> None:
    """Raises LatencyModelError unless fitted for this space and input."""
    wanted = {'search space': (self.search_space, space_name),
              'image size': (self.image_size, context.image_size),
              'input channels': (self.input_channels,
                                 context.input_channels)}
    for what, (fitted, asked) in wanted.items():
      if fitted != asked:
        raise LatencyModelError(
            f'the latency model was fitted for {what} {fitted}, not '
            f'{asked}; calibrate one with bin/calibrate_latency.py')

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=1)

  @classmethod
  def from_json(cls, text: str, path: str = 'latency model') -> 'LatencyModel':
    try:
      values = json.loads(text)
      if values.get('format') != FORMAT:
        raise ValueError(f'format {values.get("format")!r} is not {FORMAT}')
      model = cls(**values)
    except (ValueError, TypeError, AttributeError) as e:
      raise LatencyModelError(f'{path} is not a latency model written by '
                              f'bin/calibrate_latency.py: {e}') from None
    if len(model.coefficients) != len(model.feature_names):
      raise LatencyModelError(f'{path}: {len(model.coefficients)} '
                              f'coefficients for {len(model.feature_names)} '
                              'features')
    return model


def fit(rows: np.ndarray, latencies_ms: np.ndarray, names: Sequence[str],
        **fields) -> LatencyModel:
  """Fits non-negative coefficients and intercept to measurements.

  Rows are weighted by 1 / latency, so the fit minimises relative error
  (what the held-out report measures), and columns are scaled to unit
  maximum for conditioning.

  Args:
    rows: float [n, len(names)] features of the measured networks.
    latencies_ms: float [n] measured latencies.
    names: the feature names.
    **fields: the other `LatencyModel` fields (space, image size, ...).
  """
  rows = np.asarray(rows, np.float64)
  y = np.asarray(latencies_ms, np.float64)
  design = np.concatenate([rows, np.ones((len(y), 1))], axis=1)
  scale = np.abs(design).max(axis=0)
  scale[scale == 0] = 1.0
  weighted = design / scale / y[:, None]
  solution = nonnegative_least_squares(weighted, np.ones_like(y)) / scale
  return LatencyModel(feature_names=list(names),
                      coefficients=[float(c) for c in solution[:-1]],
                      intercept_ms=float(solution[-1]),
                      fitted_on=int(len(y)), **fields)


_LOADED: Dict[str, LatencyModel] = {}


def load(path: str) -> LatencyModel:
  """Reads a latency model file (cached per path)."""
  if path not in _LOADED:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    try:
      with tf.io.gfile.GFile(path) as f:
        text = f.read()
    except (tf.errors.OpError, OSError) as e:
      raise LatencyModelError(f'cannot read latency model {path}: '
                              f'{str(e).splitlines()[0]}') from None
    _LOADED[path] = LatencyModel.from_json(text, path)
  return _LOADED[path]


class MeasuredLatency(base.CostModel):
  """Latency on the user's device, from `context.cost_model_file`."""
  name = 'measured'
  unit = 'ms'
  needs_file = True
  # An intercept plus a linear function of features summed over layers.
  additive = True

  def applies(self, space_name: str, spec: Any) -> bool:
    del space_name  # Any ConvTower; the file says which space it fits.
    return isinstance(spec, ConvTower)

  def _evaluate(self, masked_spec, context, ops):
    if not context.cost_model_file:
      raise LatencyModelError('the measured cost model needs a latency model '
                              'file (--cost_model_file)')
    model = load(context.cost_model_file)
    model.check(context.space_name, context)
    return model.predict(features(masked_spec, context, model.feature_names,
                                  ops))
