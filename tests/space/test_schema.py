"""Tests for decisions, tags, traversal order and stable paths."""

import collections
import math
import re

import numpy as np
import pytest

from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.space.schema import OneOf


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
  # A sum of logs against the log of the product: float64 rounding only,
  # inside the default rel=1e-6.
  assert schema.log10_space_size(_nested_spec()) == pytest.approx(
      np.log10(3 * 2 * 2 * 2))


def test_bad_tag_and_empty_choices_are_rejected():
  with pytest.raises(ValueError, match="unknown decision tag 'width'"):
    OneOf([1], 'width')
  with pytest.raises(ValueError, match='at least one choice'):
    OneOf([], schema.OP)


class _Pair(collections.namedtuple('_Pair', ['first', 'second'])):
  """A namedtuple inside a spec is rebuilt as itself."""


def test_map_oneofs_rebuilds_every_kind_of_container():
  spec = {'b': _Pair(OneOf([1, 2], schema.OP), [OneOf([3, 4], schema.OP)]),
          'a': (OneOf([5, 6], schema.FILTERS), 'fixed'), 'c': {}, 'd': []}
  last = schema.map_oneofs(lambda _, oneof: oneof.choices[-1], spec)
  assert last == {'a': (6, 'fixed'), 'b': _Pair(2, [4]), 'c': {}, 'd': []}
  assert type(last['b']) is _Pair  # pylint: disable=unidiomatic-typecheck
  assert isinstance(last['b'].second, list)
  assert isinstance(last['a'], tuple)
  assert [d.path for d in schema.decisions(spec)] == [
      'a/0', 'b/0', 'b/1/0']


def test_map_oneofs_passes_paths_and_mapped_choices():
  seen = []

  def record(path, oneof):
    seen.append((path, oneof.choices))
    return oneof.choices[0]
  result = schema.map_oneofs(record, _nested_spec())
  # The outer OneOf sees its first choice with the inner decisions mapped.
  inner = specs.DepthwiseBottleneck(3, specs.FilterMultiplier(3.0))
  assert seen[2] == ('layers/0/layer', (inner, specs.Zero()))
  assert seen[3] == ('filters', (16, 32))
  assert result == specs.Block((specs.Residual(inner),), 16)


def test_classes_and_scalars_are_leaves():
  assert schema.children(specs.Conv) == []  # A dataclass type, not a record.
  assert schema.children('abc') == []
  assert schema.children(3) == []
  assert schema.children({'b': 1, 'a': 2}) == [('a', 2), ('b', 1)]
  assert schema.children([7, 8]) == [('0', 7), ('1', 8)]
  assert schema.children(specs.Conv(3)) == [
      ('kernel_size', 3), ('strides', 1), ('use_batch_norm', True)]
  spec = (specs.Conv, OneOf([1, 2], schema.OP))
  assert schema.map_oneofs(lambda _, o: o.choices[1], spec) == (
      specs.Conv, 2)


def test_deeply_nested_parents_and_tag_counts():
  inner = OneOf([OneOf([1, 2], schema.FILTERS), 3], schema.OP)
  spec = [OneOf([inner, 4], schema.OP), OneOf([5, 6], schema.FILTERS)]
  found = schema.decisions(spec)
  assert [d.path for d in found] == [
      '0/choices/0/choices/0', '0/choices/0', '0', '1']
  assert [d.parents for d in found] == [((2, 0), (1, 0)), ((2, 0),), (), ()]
  assert [d.tag_name for d in found] == [
      'filters_indices_0', 'op_indices_0', 'op_indices_1',
      'filters_indices_1']
  assert [d.oneof.choices for d in found][3] == (5, 6)


def test_a_spec_that_is_itself_a_decision():
  (d,) = schema.decisions(OneOf([1, 2, 3], schema.OP))
  assert (d.index, d.path, d.tag, d.tag_index, d.num_choices, d.parents) == (
      0, '', schema.OP, 0, 3, ())


def test_with_masks_refuses_too_many_masks():
  spec = _nested_spec()
  masks = [np.ones(d.num_choices) for d in schema.decisions(spec)]
  with pytest.raises(ValueError, match='^got 5 masks for 4 decisions$'):
    schema.with_masks(spec, masks + [np.ones(2)])


def test_oneof_errors_are_exact():
  with pytest.raises(ValueError, match='^OneOf needs at least one choice$'):
    OneOf((), schema.FILTERS)
  with pytest.raises(ValueError, match=re.escape(
      "unknown decision tag 'OP'; valid: ('op', 'filters')")):
    OneOf([1], 'OP')
  assert OneOf([1, 2], schema.OP).choices == (1, 2)  # Lists become tuples.
  assert OneOf([1], schema.OP, mask=[1.0]) == OneOf((1,), schema.OP)


def test_log10_space_size_is_exact_for_small_spaces():
  # The same float64 sum, in traversal order (3, 2, 2 and 2 choices).
  assert schema.log10_space_size(_nested_spec()) == sum(
      math.log10(n) for n in (3, 2, 2, 2))
  assert schema.log10_space_size(specs.Conv(3)) == 0
