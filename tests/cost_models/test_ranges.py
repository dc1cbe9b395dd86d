"""tunas_search.cost_models.ranges: a space's cheapest and dearest networks."""

import itertools

import pytest

from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.cost_models import ranges
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Block, Conv, ConvTower, FilterMultiplier,
                                Residual, UniversalInvertedBottleneck, Zero)

OP = schema.OP
CONTEXT = cost_models.CostContext(None, image_size=16, num_classes=5,
                                  input_channels=3)


def _uib(start, middle, strides=1):
  return UniversalInvertedBottleneck(start, middle, FilterMultiplier(4.0),
                                     strides)


def _tower(filters=16):
  """A strided op choice of two UIB kinds (8 networks), then a searched
  residual UIB (9): MobileNetV4's fine stage in small."""
  strided = OneOf((_uib(OneOf((0, 3, 5), OP), OneOf((3, 5), OP), 2),
                   _uib(OneOf((3, 5), OP), 0, 2)), OP)
  return ConvTower((
      Block((Conv(3, strides=2),), 8),
      Block((strided, Residual(_uib(OneOf((0, 3, 5), OP),
                                    OneOf((0, 3, 5), OP)))), filters),))


def _every_cost(spec, model):
  decisions = schema.decisions(spec)
  return [model.cost(spec, list(ix), CONTEXT) for ix in itertools.product(
      *[range(d.num_choices) for d in decisions])]


@pytest.mark.parametrize('name', ['madds', 'params'])
def test_the_range_of_fixed_widths_is_exact(name):
  model = cost_models.get(name)
  spec = _tower()
  span = ranges.cost_range(spec, model, CONTEXT)
  every = _every_cost(spec, model)
  assert span.exact
  assert (span.low, span.high) == (min(every), max(every))
  assert model.cost(spec, span.low_indices, CONTEXT) == span.low
  assert model.cost(spec, span.high_indices, CONTEXT) == span.high
  # The cheapest strided block is the ConvNext-like 3x3 (its expansion runs
  # at the output's resolution), the dearest the ExtraDW 5/5.
  cheap = architecture.prune(spec, span.low_indices).blocks[1].layers[0]
  dear = architecture.prune(spec, span.high_indices).blocks[1].layers[0]
  assert (cheap.start_kernel_size, cheap.middle_kernel_size) == (3, 0)
  assert (dear.start_kernel_size, dear.middle_kernel_size) == (5, 5)
  assert span.contains(span.low) and not span.contains(span.high + 1)


def test_a_width_decision_makes_it_an_estimate():
  # A width changes the input of the layers after it: layer by layer, the
  # search is no longer exact (its ends are real networks' costs).
  model = cost_models.get('madds')
  spec = _tower(OneOf((8, 16), schema.FILTERS))
  span = ranges.cost_range(spec, model, CONTEXT)
  every = _every_cost(spec, model)
  assert not span.exact
  assert min(every) <= span.low <= span.high <= max(every)
  assert model.cost(spec, span.high_indices, CONTEXT) == span.high


class _Squared(cost_models.CostModel):
  """MAdds squared: not a sum over layers."""
  name, unit = 'squared', 'madds^2'

  def applies(self, space_name, spec):
    return True

  def _evaluate(self, masked_spec, context, ops):
    return cost_models.get('madds')._evaluate(  # pylint: disable=protected-access
        masked_spec, context, ops) ** 2


def test_a_cost_model_that_is_no_sum_over_layers_gives_an_estimate():
  span = ranges.cost_range(_tower(), _Squared(), CONTEXT)
  madds = ranges.cost_range(_tower(), cost_models.get('madds'), CONTEXT)
  assert not span.exact
  assert (span.low, span.high) == (madds.low ** 2, madds.high ** 2)


def test_a_skip_outside_a_residual_makes_it_an_estimate():
  # Skipping the 8 -> 16 conv passes 8 channels on, not 16: the layer
  # after it then costs less, so the layers are not independent.
  spec = ConvTower((Block((Conv(3, strides=2),), 8), Block((
      OneOf((Conv(3), Zero()), OP),
      _uib(OneOf((0, 3), OP), OneOf((0, 3), OP))), 16),))
  span = ranges.cost_range(spec, cost_models.get('madds'), CONTEXT)
  assert not span.exact
  residual = ConvTower((Block((Conv(3, strides=2),), 16), Block((
      Residual(OneOf((Conv(3), Zero()), OP)),
      _uib(OneOf((0, 3), OP), OneOf((0, 3), OP))), 16),))
  assert ranges.cost_range(residual, cost_models.get('madds'), CONTEXT).exact
