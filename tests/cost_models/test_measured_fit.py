"""The measured latency model's numpy side: features, the fit, the file format.

No TensorFlow here (`make mutation` runs these for every mutant of
`cost_models/measured.py`); tests/cost_models/test_measured.py has the
in-graph features and the cost model reading its file.
"""

import json

import numpy as np
import pytest

import search_spaces
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.cost_models import analytic
from tunas_search.cost_models import measured
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      GlobalAveragePool, Residual, Zero)

_SPACES = ['proxylessnas_search', 'proxylessnas_enlarged_search',
           'mobilenet_v3_like_search']


def small_spec() -> ConvTower:
  """A searched stem width, kernel size and skip: 3 decisions."""
  bneck = DepthwiseBottleneck(OneOf([3, 5], schema.OP), FilterMultiplier(3.0))
  return ConvTower((
      Block((Conv(3, strides=2), Activation('relu')),
            OneOf([8, 16], schema.FILTERS)),
      Block((Residual(OneOf([bneck, Zero()], schema.OP)),), 16),
      Block((Conv(1), GlobalAveragePool()), 32),
  ))


def small_context(**kwargs):
  values = dict(image_size=28, input_channels=1, num_classes=10)
  values.update(kwargs)
  return cost_models.CostContext('small', **values)


def random_architectures(spec, n, seed):
  """`n` architectures of `spec` drawn with `seed`."""
  rng = np.random.default_rng(seed)
  return [architecture.random_indices(spec, rng) for _ in range(n)]


def synthetic_model(spec, context, seed=0):
  """A known linear device and the fit of 60 of its measurements.

  Returns:
    (model, feature rows, latencies in ms).
  """
  names = measured.feature_names(spec, context)
  rng = np.random.default_rng(seed)
  truth = rng.uniform(size=len(names)) * (rng.uniform(size=len(names)) > 0.5)
  # Per-unit costs: 1 ms per 1e8 madds, per 1e7 elements, per 10 layers.
  unit = {'madds': 1e-8, 'memory': 1e-7, 'count': 0.1}
  truth *= np.array([unit[n.rsplit('/', 1)[1]] for n in names])
  rows = np.array([measured.features(architecture.with_indices(spec, i),
                                     context, names)
                   for i in random_architectures(spec, 60, seed=3)])
  latencies = rows @ truth + 2.0
  model = measured.fit(rows, latencies, names,
                       search_space=context.space_name,
                       image_size=context.image_size,
                       input_channels=context.input_channels,
                       num_classes=context.num_classes)
  return model, rows, latencies


@pytest.mark.parametrize('space', _SPACES)
def test_per_kind_madds_add_up_to_the_exact_count(space):
  spec = search_spaces.get(space).spec()
  context = cost_models.CostContext(space)
  names = measured.feature_names(spec, context)
  assert 'depthwise5x5/madds' in names and 'dense/count' in names
  for indices in random_architectures(spec, 5, seed=1):
    masked = architecture.with_indices(spec, indices)
    values = dict(zip(names, measured.features(masked, context, names)))
    total = sum(v for n, v in values.items() if n.endswith('/madds'))
    assert total == pytest.approx(analytic.count(masked, context)[1],
                                  rel=1e-12)
    # One classifier, and memory traffic at least the madds' operands.
    assert values['dense/count'] == 1.0
    assert values['project1x1/memory'] > 0


def test_feature_names_list_every_kind_of_the_space_sorted():
  names = measured.feature_names(small_spec(), small_context())
  kinds = ['conv1x1', 'conv3x3', 'dense', 'depthwise3x3', 'depthwise5x5',
           'expand1x1', 'pool', 'project1x1', 'se']
  assert names == [f'{k}/{q}' for k in kinds
                   for q in ('madds', 'memory', 'count')]


def test_features_follow_the_names_and_are_zero_for_missing_kinds():
  spec, context = small_spec(), small_context()
  # Stem 8 wide, kernel 5, the bottleneck skipped (Zero): no expand,
  # depthwise or project layer runs.
  skipped = architecture.with_indices(spec, [0, 1, 1])
  names = ['dense/count', 'expand1x1/madds', 'conv3x3/madds', 'unknown/count']
  # conv3x3 1 -> 8 at 14x14: 9 * 8 * 196 madds.
  assert measured.features(skipped, context, names) == [1.0, 0.0,
                                                        9 * 8 * 196, 0.0]
  # With the bottleneck (kernel 5): 8 -> 24 (x3) at 14x14, and its 5x5 only.
  used = architecture.with_indices(spec, [0, 1, 0])
  all_names = measured.feature_names(spec, context)
  values = dict(zip(all_names, measured.features(used, context, all_names)))
  assert values['expand1x1/madds'] == 8 * 24 * 196
  assert values['depthwise5x5/count'] == 1.0
  assert values['depthwise3x3/count'] == 0.0


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
  # Every column hurts: the zero vector.
  np.testing.assert_array_equal(
      measured.nonnegative_least_squares(a, -a @ np.ones(6)), np.zeros(6))


def test_kendall_tau():
  assert measured.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
  assert measured.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
  # One discordant pair out of six: (5 - 1) / 6.
  assert measured.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(
      4 / 6)
  assert measured.kendall_tau([1, 2], [2, 3]) == 1.0
  with pytest.raises(ValueError, match='^Kendall tau needs at least two '
                     'points$'):
    measured.kendall_tau([1], [1])


def test_error_report():
  report = measured.error_report([1.0, 2.19, 2.9, 4.5], [1.0, 2.0, 3.0, 4.0])
  # Relative errors 0, 0.095, 1/30, 0.125 (none on a boundary).
  assert report == pytest.approx({
      'count': 4, 'mape_percent': 100 * (0 + 0.095 + 1 / 30 + 0.125) / 4,
      'within_5_percent': 0.5, 'within_10_percent': 0.75,
      'kendall_tau': 1.0})
  assert type(report['count']) is int  # pylint: disable=unidiomatic-typecheck
  # On the boundaries: 5% and 10% count as within.
  edges = measured.error_report([21.0, 11.0], [20.0, 10.0])
  assert (edges['within_5_percent'], edges['within_10_percent']) == (0.5, 1.0)


def test_fit_recovers_a_linear_device():
  context = small_context()
  model, rows, latencies = synthetic_model(small_spec(), context)
  predicted = [model.predict(r) for r in rows]
  np.testing.assert_allclose(predicted, latencies, rtol=1e-6)
  # Non-negative; the 2 ms constant may sit in the intercept or in a
  # feature that every architecture has once (dense/count).
  assert min(model.coefficients) >= 0 and model.intercept_ms >= 0
  assert model.fitted_on == 60
  assert model.feature_names == measured.feature_names(small_spec(), context)
  assert (model.search_space, model.image_size, model.input_channels,
          model.num_classes) == ('small', 28, 1, 10)
  assert model.format == measured.FORMAT


def test_fit_handles_a_feature_that_is_always_zero():
  rows = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
  model = measured.fit(rows, 2.0 * rows[:, 0] + 1.0, ['a/madds', 'b/madds'],
                       search_space='s', image_size=28, input_channels=1,
                       num_classes=2)
  np.testing.assert_allclose(model.coefficients, [2.0, 0.0], atol=1e-9)
  assert model.intercept_ms == pytest.approx(1.0)


def test_predict_is_the_intercept_plus_the_weighted_features():
  model = measured.LatencyModel('s', 28, 1, 2, ['a', 'b', 'c'],
                                [2.0, 0.0, 0.5], 1.5)
  assert model.predict([10.0, 100.0, 4.0]) == 1.5 + 20.0 + 2.0
  assert model.predict([0.0, 0.0, 0.0]) == 1.5


def test_the_file_round_trips_and_bad_files_are_named():
  model = measured.LatencyModel('s', 28, 1, 2, ['a', 'b'], [2.0, 0.5], 1.5,
                                device={'cpu': 'x'}, heldout={'count': 3},
                                fitted_on=7)
  assert measured.LatencyModel.from_json(model.to_json()) == model
  values = json.loads(model.to_json())
  prefix = 'm.json is not a latency model written by bin/calibrate_latency.py: '
  for text, reason in [
      ('{"format": "x"}', f"format 'x' is not {measured.FORMAT}"),
      ('[]', "'list' object has no attribute 'get'"),
      ('not json', 'Expecting value: line 1 column 1 (char 0)'),
      (json.dumps(dict(values, extra=1)), 'unexpected keyword argument '
       "'extra'"),
  ]:
    with pytest.raises(measured.LatencyModelError) as error:
      measured.LatencyModel.from_json(text, 'm.json')
    assert str(error.value).startswith(prefix)
    assert reason in str(error.value)
  with pytest.raises(measured.LatencyModelError) as error:
    measured.LatencyModel.from_json(json.dumps(dict(values,
                                                    coefficients=[1.0])))
  assert str(error.value) == 'latency model: 1 coefficients for 2 features'


def test_check_refuses_another_space_or_input():
  model = measured.LatencyModel('s', 28, 1, 10, [], [], 0.0)
  model.check('s', small_context())
  # The number of classes may differ (only the classifier changes).
  model.check('s', small_context(num_classes=5))
  for space, context, message in [
      ('t', small_context(), 'search space s, not t'),
      ('s', small_context(image_size=32), 'image size 28, not 32'),
      ('s', small_context(input_channels=3), 'input channels 1, not 3')]:
    with pytest.raises(measured.LatencyModelError) as error:
      model.check(space, context)
    assert str(error.value) == (
        f'the latency model was fitted for {message}; calibrate one with '
        'bin/calibrate_latency.py')


def _brute_force_nnls(a, b):
  """The exact NNLS solution: the best feasible least-squares fit over every
  set of free columns (2^n subsets; small n only)."""
  n = a.shape[1]
  best, best_error = np.zeros(n), float(np.sum(b * b))
  for bits in range(1, 2 ** n):
    free = np.array([(bits >> i) & 1 for i in range(n)], bool)
    x = np.zeros(n)
    x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
    error = float(np.sum((a @ x - b) ** 2))
    if (x >= 0).all() and error < best_error - 1e-12:
      best, best_error = x, error
  return best


# Seeds 0-2 are plain; in the others a column that entered the fit must
# leave again once others enter (Lawson and Hanson's inner loop).
@pytest.mark.parametrize('seed', [0, 1, 2, 4, 8, 31, 60, 61, 67])
def test_nonnegative_least_squares_matches_the_exhaustive_solution(seed):
  rng = np.random.default_rng(seed)
  a = rng.uniform(size=(12, 6)) + 0.5 * rng.uniform(size=(12, 1))
  b = a @ rng.normal(size=6) + 0.1 * rng.normal(size=12)
  np.testing.assert_allclose(measured.nonnegative_least_squares(a, b),
                             _brute_force_nnls(a, b), atol=1e-8)


def test_a_column_that_enters_first_can_leave_again():
  # Column 2 correlates best with b (a.T @ b = [14, -13, 20]) and enters
  # first, then column 0; their joint fit is 14 and -8, so column 2 leaves
  # and column 0 alone fits b: 14 / 9.
  a = np.array([[2.0, 1.0, 3.0],
                [0.0, 3.0, 0.0],
                [2.0, 2.0, 3.0],
                [1.0, 3.0, 2.0]])
  b = np.array([5.0, -6.0, 3.0, -2.0])
  np.testing.assert_allclose(measured.nonnegative_least_squares(a, b),
                             [14 / 9, 0.0, 0.0], atol=1e-12)


# Problems in which the inner loop runs twice in one outer step: the first
# interpolation leaves a coefficient that must drop out too.
@pytest.mark.parametrize('a, b', [
    ([[2, 3, 1, 2], [3, 2, 1, 1], [2, 2, 2, 1], [1, 2, 1, 3], [3, 0, 2, 2],
      [0, 0, 1, 2]], [1, 3, 5, 3, 11, 5]),
    ([[3, 2, 3, 3], [2, 1, 1, 1], [3, 0, 3, 3], [1, 0, 0, 0], [1, 3, 3, 1],
      [0, 2, 2, 1]], [12, 3, 18, 0, 3, 3]),
    ([[0, 3, 0, 3], [2, 3, 1, 1], [0, 0, 1, 2], [2, 2, 3, 3], [1, 2, 1, 2],
      [0, 1, 0, 1]], [0, 7, -1, 7, 3, 0]),
])
def test_several_columns_can_leave_in_one_step(a, b):
  a, b = np.array(a, np.float64), np.array(b, np.float64)
  np.testing.assert_allclose(measured.nonnegative_least_squares(a, b),
                             _brute_force_nnls(a, b), atol=1e-9)


def test_kendall_tau_counts_ties_as_neither():
  # Pairs (0,1) tied in b, (0,2) and (1,2) concordant: tau-a = 2 / 3.
  assert measured.kendall_tau([1.0, 2.0, 3.0], [5.0, 5.0, 6.0]) == (
      pytest.approx(2 / 3))


def test_unsigned_inputs_are_compared_as_numbers():
  # Differences of unsigned integers would wrap around without the float64
  # conversion.
  latencies = np.array([10, 20, 40], np.uint8)
  assert measured.kendall_tau([3.0, 2.0, 1.0], latencies) == -1
  assert measured.kendall_tau(latencies, [3.0, 2.0, 1.0]) == -1
  report = measured.error_report(np.array([11, 18, 40], np.uint8), latencies)
  assert report['mape_percent'] == pytest.approx(100 * (0.1 + 0.1 + 0) / 3)
  rows = np.array([[1], [2], [4]], np.uint8)
  model = measured.fit(rows, latencies, ['a/madds'], search_space='s',
                       image_size=28, input_channels=1, num_classes=2)
  assert model.predict([3]) == pytest.approx(30.0)


def test_the_file_is_one_field_per_line():
  text = measured.LatencyModel('s', 28, 1, 2, [], [], 0.0).to_json()
  assert text.startswith('{\n "search_space": "s",\n "image_size": 28,\n')
