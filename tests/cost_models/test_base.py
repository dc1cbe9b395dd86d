"""Tests of the cost-model interface's numpy side: context, masks, NumpyOps."""

import re

import numpy as np
import pytest

from tunas_search import cost_models
from tunas_search.cost_models import base
from tunas_search.space.schema import OP, OneOf
from tunas_search.space.specs import Block, Conv, ConvTower

OPS = base.NUMPY_OPS


def test_context_defaults_are_imagenet_at_224():
  context = base.CostContext('x')
  assert (context.space_name, context.image_size, context.num_classes,
          context.input_channels) == ('x', 224, 1000, 3)
  base.CostContext(None, 1, 1, 1)  # The smallest valid values.


@pytest.mark.parametrize('field', ['image_size', 'num_classes',
                                   'input_channels'])
@pytest.mark.parametrize('value', [0, -3, True, 2.0, '8'])
def test_context_fields_must_be_positive_ints(field, value):
  message = f'CostContext.{field} must be a positive int, got {value!r}'
  with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
    base.CostContext('x', **{field: value})


def test_mask_of_checks_presence_and_length():
  oneof = OneOf((3, 5, 7), OP)
  with pytest.raises(ValueError, match=re.escape(
      'OneOf (3, 5, 7) has no mask; attach masks with '
      'architecture.with_indices or schema.with_masks')):
    base.mask_of(oneof, OPS)
  with pytest.raises(ValueError, match="^OneOf 'a/b' has no mask"):
    base.mask_of(oneof, OPS, 'a/b')
  short = OneOf((3, 5, 7), OP, mask=np.ones([2]))
  with pytest.raises(ValueError, match=re.escape(
      'OneOf (3, 5, 7) has 3 choices but a mask of length 2')):
    base.mask_of(short, OPS)
  with pytest.raises(ValueError, match=re.escape(
      "OneOf 'k' has 3 choices but a mask of length 2")):
    base.mask_of(short, OPS, 'k')
  mask = base.mask_of(OneOf((3, 5, 7), OP, mask=[[0, 1, 0]]), OPS)
  assert mask.dtype == np.float64
  np.testing.assert_array_equal(mask, [0.0, 1.0, 0.0])


def test_numpy_ops_are_float64_vectors():
  assert OPS.vector(np.float32([[1.5], [2.5]])).dtype == np.float64
  np.testing.assert_array_equal(OPS.vector([[1, 2], [3, 4]]), [1, 2, 3, 4])
  assert OPS.length(np.zeros([5])) == 5
  ones = OPS.ones(3)
  assert ones.dtype == np.float64 and ones.tolist() == [1.0, 1.0, 1.0]
  # The outer product is flattened with `a` major: numpy's kron.
  a, b = np.array([1.0, 2.0]), np.array([1.0, 10.0, 100.0])
  np.testing.assert_array_equal(OPS.outer(a, b), np.kron(a, b))
  np.testing.assert_array_equal(OPS.concat([a, b]), [1, 2, 1, 10, 100])
  assert OPS.dot(a, np.array([3.0, 4.0])) == 11.0
  matrix = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  np.testing.assert_array_equal(OPS.matvec(a, matrix), [9.0, 12.0, 15.0])
  assert OPS.unstack(np.array([7.0, 8.0])) == [7.0, 8.0]


def test_cost_is_a_python_float_of_the_masked_spec():
  tower = ConvTower((Block((Conv(OneOf((1, 3), OP)),), 8),))
  context = base.CostContext(None, 4, 2, 1)
  madds = cost_models.get('madds')
  # 1x1 or 3x3 conv 1 -> 8 channels at 4x4, then the 8 -> 2 classifier.
  values = [madds.cost(tower, [i], context) for i in (0, 1)]
  assert values == [8 * 16 + 16, 72 * 16 + 16]
  assert all(type(v) is float for v in values)  # pylint: disable=unidiomatic-typecheck
