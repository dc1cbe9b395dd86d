"""Tests for spec <-> JSON round trips through the spec-type registry."""

import json

import pytest

import search_spaces
from tunas_search.space import schema
from tunas_search.space import serialization
from tunas_search.space import specs


@pytest.mark.parametrize('name', search_spaces.names())
def test_every_registered_space_round_trips_exactly(name):
  spec = search_spaces.get(name).spec()
  text = serialization.dumps(spec)
  assert serialization.loads(text) == spec
  assert serialization.dumps(serialization.loads(text)) == text


def test_containers_keep_their_kind():
  value = {'a': (1, 2.5), 'b': [True, None, 'x']}
  assert serialization.loads(serialization.dumps(value)) == value
  assert isinstance(serialization.loads(serialization.dumps((1,))), tuple)


def test_unregistered_type_is_never_instantiated():
  doc = json.dumps({'__type__': 'os.system', 'command': 'true'})
  with pytest.raises(serialization.SpecJSONError,
                     match="unknown spec type 'os.system'; valid: .*OneOf"):
    serialization.loads(doc)


def test_unknown_field_and_malformed_json_are_clear_errors():
  doc = json.dumps({'__type__': 'Zero', 'evil': 1})
  with pytest.raises(serialization.SpecJSONError,
                     match=r"unknown field\(s\) \['evil'\] for spec type Zero"):
    serialization.loads(doc)
  with pytest.raises(serialization.SpecJSONError, match='malformed spec JSON'):
    serialization.loads('{"__type__": ')


def test_invalid_field_value_is_reported():
  doc = json.dumps({'__type__': 'Activation', 'name': 'gelu'})
  with pytest.raises(serialization.SpecJSONError, match="unknown activation 'gelu'"):
    serialization.loads(doc)


def test_unregistered_dataclass_cannot_be_saved():
  import dataclasses  # pylint: disable=g-import-not-at-top

  @dataclasses.dataclass(frozen=True)
  class Private:
    x: int = 1

  with pytest.raises(TypeError, match='Private is not a registered spec type'):
    serialization.dumps(specs.Block((Private(),), 8))


def test_registered_types_are_sorted_names():
  names = serialization.registered_types()
  assert names == sorted(names)
  assert {'OneOf', 'ConvTower', 'Block', 'DepthwiseBottleneck'} <= set(names)


def test_register_checks_its_argument(monkeypatch):
  # A private copy of the registry: the probes below must not leak into
  # the other tests' "valid: ..." lists.
  monkeypatch.setattr(serialization, '_SPEC_TYPES',
                      dict(serialization._SPEC_TYPES))  # pylint: disable=protected-access
  import dataclasses  # pylint: disable=g-import-not-at-top

  class NotADataclass:
    pass

  with pytest.raises(TypeError, match='^NotADataclass is not a dataclass$'):
    serialization.register(NotADataclass)

  @dataclasses.dataclass(frozen=True)
  class Probe:
    x: int = 1

  assert serialization.register(Probe) is Probe
  assert serialization.register(Probe) is Probe  # Registering again is fine.
  assert 'Probe' in serialization.registered_types()
  assert serialization.loads(serialization.dumps(Probe(3))) == Probe(3)

  @dataclasses.dataclass(frozen=True)
  class Probe:  # pylint: disable=function-redefined
    y: int = 2

  with pytest.raises(ValueError,
                     match="^spec type 'Probe' is already registered$"):
    serialization.register(Probe)


def test_values_that_cannot_be_serialised():
  with pytest.raises(TypeError,
                     match='^only dicts with string keys can be serialised$'):
    serialization.dumps({1: 'a'})
  with pytest.raises(TypeError, match='^cannot serialise a set$'):
    serialization.dumps([{1, 2}])


def test_unknown_type_lists_every_valid_name():
  valid = ', '.join(serialization.registered_types())
  with pytest.raises(serialization.SpecJSONError) as error:
    serialization.loads('{"__type__": "Nope"}')
  assert str(error.value) == f"unknown spec type 'Nope'; valid: {valid}"
  with pytest.raises(serialization.SpecJSONError,
                     match="^unknown spec type None; valid: "):
    serialization.loads('{"a": 1}')  # A plain dict without a type name.


def test_dumps_sorts_keys_and_indents_on_request():
  spec = specs.Conv(3, strides=2)
  assert serialization.dumps(spec) == (
      '{"__type__": "Conv", "kernel_size": 3, "strides": 2, '
      '"use_batch_norm": true}')
  assert serialization.dumps({'b': 1, 'a': [2]}, indent=1) == (
      '{\n "__dict__": {\n  "a": [\n   2\n  ],\n  "b": 1\n }\n}')


def test_masks_are_left_out_of_the_json():
  oneof = schema.OneOf([1, 2], schema.OP, mask=[0.0, 1.0])
  assert serialization.to_jsonable(oneof) == {
      '__type__': 'OneOf', 'choices': {'__tuple__': [1, 2]}, 'tag': 'op'}
  assert serialization.from_jsonable(
      serialization.to_jsonable(oneof)).mask is None


def test_bad_arguments_of_a_registered_type_are_spec_errors():
  with pytest.raises(serialization.SpecJSONError,
                     match=r"^bad OneOf in spec JSON: .*'tag'"):
    serialization.loads('{"__type__": "OneOf", "choices": [1]}')
  with pytest.raises(serialization.SpecJSONError,
                     match='^malformed spec JSON: Expecting value'):
    serialization.loads('')
