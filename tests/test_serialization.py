"""Tests for spec <-> JSON round trips through the spec-type registry."""

import json

import pytest

import search_spaces
from tunas_search import serialization
from tunas_search import specs


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
