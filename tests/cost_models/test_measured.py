"""The measured latency model in the graph and as a cost model reading its file.

The numpy side (features, the fit, the file format) is in
test_measured_fit.py, which runs without TensorFlow.
"""

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tests.cost_models.test_measured_fit import random_architectures
from tests.cost_models.test_measured_fit import synthetic_model
from tests.e2e import tiny
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.cost_models import analytic
from tunas_search.cost_models import measured


def _context(space, **kwargs):
  return cost_models.CostContext(space, **kwargs)


def test_features_in_graph_match_numpy():
  spec = search_spaces.get('proxylessnas_search').spec()
  context = _context('proxylessnas_search')
  names = measured.feature_names(spec, context)
  indices = random_architectures(spec, 1, seed=2)[0]
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


def test_cost_model_reads_the_file_and_refuses_other_inputs(tmp_path):
  spec = tiny.tiny_spec()
  context = _context('tiny', image_size=28, input_channels=1, num_classes=10)
  model, _, _ = synthetic_model(spec, context)
  path = tmp_path / 'latency_model.json'
  path.write_text(model.to_json())
  assert measured.LatencyModel.from_json(path.read_text()) == model
  context = _context('tiny', image_size=28, input_channels=1, num_classes=10,
                     cost_model_file=str(path))
  indices = random_architectures(spec, 1, seed=4)[0]
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
