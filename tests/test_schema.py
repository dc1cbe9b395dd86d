"""Tests for decisions, tags, traversal order and stable paths."""

import numpy as np
import pytest

from tunas_search import schema
from tunas_search import specs
from tunas_search.schema import OneOf


def _nested_spec():
  inner = specs.DepthwiseBottleneck(
      kernel_size=OneOf([3, 5, 7], schema.OP),
      expansion_filters=OneOf([specs.FilterMultiplier(3.0),
                               specs.FilterMultiplier(6.0)], schema.FILTERS))
  return specs.Block(
      layers=(specs.Residual(OneOf([inner, specs.Zero()], schema.OP)),),
      filters=OneOf([16, 32], schema.FILTERS))


def test_children_come_before_parents_in_field_order():
  found = schema.decisions(_nested_spec())
  assert [d.path for d in found] == [
      'layers/0/layer/choices/0/kernel_size',
      'layers/0/layer/choices/0/expansion_filters',
      'layers/0/layer',
      'filters',
  ]
  assert [d.index for d in found] == [0, 1, 2, 3]
  assert [d.num_choices for d in found] == [3, 2, 2, 2]


def test_tag_names_count_per_tag():
  found = schema.decisions(_nested_spec())
  assert [d.tag_name for d in found] == [
      'op_indices_0', 'filters_indices_0', 'op_indices_1', 'filters_indices_1']


def test_parents_record_the_enclosing_choice():
  found = schema.decisions(_nested_spec())
  assert found[0].parents == ((2, 0),)
  assert found[1].parents == ((2, 0),)
  assert found[2].parents == ()


def test_dict_keys_are_walked_sorted():
  spec = {'b': OneOf([1, 2], schema.OP), 'a': OneOf([1, 2, 3], schema.OP)}
  assert [d.path for d in schema.decisions(spec)] == ['a', 'b']


def test_map_oneofs_visits_in_traversal_order():
  seen = []
  schema.map_oneofs(lambda path, o: seen.append(path) or o, _nested_spec())
  assert seen == [d.path for d in schema.decisions(_nested_spec())]


def test_with_masks_attaches_masks_and_checks_count():
  spec = _nested_spec()
  masks = [np.eye(d.num_choices)[0] for d in schema.decisions(spec)]
  masked = schema.with_masks(spec, masks)
  assert masked == spec  # Masks do not take part in equality.
  got = [d.oneof.mask for d in schema.decisions(masked)]
  assert all(np.array_equal(a, b) for a, b in zip(got, masks))
  with pytest.raises(ValueError, match='got 1 masks for 4 decisions'):
    schema.with_masks(spec, masks[:1])


def test_log10_space_size():
  assert schema.log10_space_size(_nested_spec()) == pytest.approx(
      np.log10(3 * 2 * 2 * 2))


def test_bad_tag_and_empty_choices_are_rejected():
  with pytest.raises(ValueError, match="unknown decision tag 'width'"):
    OneOf([1], 'width')
  with pytest.raises(ValueError, match='at least one choice'):
    OneOf([], schema.OP)
