"""The measured latency model: features, the fit, its file and its checks."""

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tests.e2e import tiny
from tunas_search import architecture
from tunas_search import cost_models
from tunas_search import schema
from tunas_search.cost_models import analytic
from tunas_search.cost_models import measured

_SPACES = ['proxylessnas_search', 'proxylessnas_enlarged_search',
           'mobilenet_v3_like_search']


def _context(space, **kwargs):
  return cost_models.CostContext(space, **kwargs)


def _random(spec, n, seed):
  rng = np.random.default_rng(seed)
  return [architecture.random_indices(spec, rng) for _ in range(n)]


@pytest.mark.parametrize('space', _SPACES)
def test_per_kind_madds_add_up_to_the_exact_count(space):
  spec = search_spaces.get(space).spec()
  context = _context(space)
  names = measured.feature_names(spec, context)
  assert 'depthwise5x5/madds' in names and 'dense/count' in names
  for indices in _random(spec, 5, seed=1):
    masked = architecture.with_indices(spec, indices)
    values = dict(zip(names, measured.features(masked, context, names)))
    total = sum(v for n, v in values.items() if n.endswith('/madds'))
    assert total == pytest.approx(analytic.count(masked, context)[1],
                                  rel=1e-12)
    # One classifier, and memory traffic at least the madds' operands.
    assert values['dense/count'] == 1.0
    assert values['project1x1/memory'] > 0


def test_features_in_graph_match_numpy():
  spec = search_spaces.get('proxylessnas_search').spec()
  context = _context('proxylessnas_search')
  names = measured.feature_names(spec, context)
  indices = _random(spec, 1, seed=2)[0]
  expected = measured.features(architecture.with_indices(spec, indices),
                               context, names)
  with tf.Graph().as_default():
    masked = schema.with_masks(spec, [
        tf.constant(m) for m in architecture.one_hot_masks(spec, indices)])
    graph_values = measured.features(masked, context, names, analytic.base.TFOps())
    with tf.compat.v1.Session() as session:
      got = session.run([tf.cast(v, tf.float64) for v in graph_values])
  # float32 in the graph: 1e-6 relative.
  np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_nonnegative_least_squares_recovers_and_clips():
  rng = np.random.default_rng(0)
  a = rng.uniform(size=(40, 6))
  truth = np.array([0.0, 2.0, 0.5, 0.0, 1.5, 3.0])
  np.testing.assert_allclose(measured.nonnegative_least_squares(a, a @ truth),
                             truth, atol=1e-9)
  # A target that unconstrained least squares fits with a negative weight:
  # the result is >= 0 and optimal (no zero weight could lower the error).
  b = a @ np.array([1.0, -2.0, 0.0, 1.0, 0.0, 0.5])
  x = measured.nonnegative_least_squares(a, b)
  assert (x >= 0).all()
  gradient = a.T @ (b - a @ x)
  assert (gradient[x == 0] <= 1e-9).all()
  np.testing.assert_allclose(gradient[x > 0], 0.0, atol=1e-9)


def test_kendall_tau():
  assert measured.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
  assert measured.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
  # One discordant pair out of six: (5 - 1) / 6.
  assert measured.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(
      4 / 6)


def test_error_report():
  report = measured.error_report([1.0, 2.19, 2.9, 4.5], [1.0, 2.0, 3.0, 4.0])
  assert report['count'] == 4
  # Relative errors 0, 0.095, 1/30, 0.125 (none on a boundary).
  assert report['mape_percent'] == pytest.approx(
      100 * (0 + 0.095 + 1 / 30 + 0.125) / 4)
  assert report['within_5_percent'] == 0.5
  assert report['within_10_percent'] == 0.75
  assert report['kendall_tau'] == 1.0


def _synthetic_model(spec, context, seed=0):
  """A known linear device and the fit of 60 of its measurements."""
  names = measured.feature_names(spec, context)
  rng = np.random.default_rng(seed)
  truth = rng.uniform(size=len(names)) * (rng.uniform(size=len(names)) > 0.5)
  # Per-unit costs: 1 ms per 1e8 madds, per 1e7 elements, per 10 layers.
  unit = {'madds': 1e-8, 'memory': 1e-7, 'count': 0.1}
  truth *= np.array([unit[n.rsplit('/', 1)[1]] for n in names])
  rows = np.array([measured.features(architecture.with_indices(spec, i),
                                     context, names)
                   for i in _random(spec, 60, seed=3)])
  latencies = rows @ truth + 2.0
  model = measured.fit(rows, latencies, names, search_space='tiny',
                       image_size=context.image_size,
                       input_channels=context.input_channels,
                       num_classes=context.num_classes)
  return model, rows, latencies


def test_fit_recovers_a_linear_device():
  context = _context('tiny', image_size=28, input_channels=1, num_classes=10)
  model, rows, latencies = _synthetic_model(tiny.tiny_spec(), context)
  predicted = [model.predict(r) for r in rows]
  np.testing.assert_allclose(predicted, latencies, rtol=1e-6)
  assert min(model.coefficients) >= 0 and model.intercept_ms >= 0


def test_cost_model_reads_the_file_and_refuses_other_inputs(tmp_path):
  spec = tiny.tiny_spec()
  context = _context('tiny', image_size=28, input_channels=1, num_classes=10)
  model, _, _ = _synthetic_model(spec, context)
  path = tmp_path / 'latency_model.json'
  path.write_text(model.to_json())
  assert measured.LatencyModel.from_json(path.read_text()) == model
  context = _context('tiny', image_size=28, input_channels=1, num_classes=10,
                     cost_model_file=str(path))
  indices = _random(spec, 1, seed=4)[0]
  ms = cost_models.get('measured').cost(spec, indices, context)
  names = model.feature_names
  assert ms == pytest.approx(model.predict(measured.features(
      architecture.with_indices(spec, indices), context, names)))
  assert cost_models.applicable('tiny', spec, str(path))[1] == 'measured'
  assert 'measured' not in cost_models.applicable('tiny', spec)
  for other, message in [
      (dict(image_size=32), 'fitted for image size 28, not 32'),
      (dict(input_channels=3), 'fitted for input channels 1, not 3')]:
    values = dict(image_size=28, input_channels=1, num_classes=10,
                  cost_model_file=str(path))
    values.update(other)
    with pytest.raises(cost_models.LatencyModelError, match=message):
      cost_models.check_file('measured', _context('tiny', **values))
  with pytest.raises(cost_models.LatencyModelError,
                     match='fitted for search space tiny, not other'):
    cost_models.check_file('measured', _context(
        'other', image_size=28, input_channels=1, cost_model_file=str(path)))
  with pytest.raises(cost_models.LatencyModelError, match='needs --cost_'):
    cost_models.check_file('measured', _context('tiny'))
  garbage = tmp_path / 'garbage.json'
  garbage.write_text('{"format": "x"}')
  with pytest.raises(cost_models.LatencyModelError,
                     match='is not a latency model written by'):
    measured.load(str(garbage))
