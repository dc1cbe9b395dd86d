"""Model spec <-> JSON through a registry of named spec types.

Only types registered here are ever instantiated when loading, so a JSON file
cannot make the loader run arbitrary code. Lists, tuples and dicts are kept
apart so that a round trip gives back an equal spec.
"""

import dataclasses
import json
from typing import Any, Dict, Type

_TYPE_KEY = '__type__'
_TUPLE_KEY = '__tuple__'
_DICT_KEY = '__dict__'

_SPEC_TYPES: Dict[str, Type[Any]] = {}


class SpecJSONError(ValueError):
  """A JSON document is not a valid model spec."""


def register(cls: Type[Any]) -> Type[Any]:
  """Class decorator: registers a frozen dataclass as a serialisable spec type."""
  if not dataclasses.is_dataclass(cls):
    raise TypeError(f'{cls.__name__} is not a dataclass')
  name = cls.__name__
  if name in _SPEC_TYPES and _SPEC_TYPES[name] is not cls:
    raise ValueError(f'spec type {name!r} is already registered')
  _SPEC_TYPES[name] = cls
  return cls


def registered_types():
  """Names of the registered spec types, sorted."""
  return sorted(_SPEC_TYPES)


def to_jsonable(spec: Any) -> Any:
  """Turns a spec into plain JSON-compatible Python values.

  Raises:
    TypeError: for a value that is neither a registered spec type, a
      container nor a scalar.
  """
  if isinstance(spec, (bool, int, float, str)) or spec is None:
    return spec
  if dataclasses.is_dataclass(spec):
    name = type(spec).__name__
    if _SPEC_TYPES.get(name) is not type(spec):
      raise TypeError(f'{name} is not a registered spec type')
    out = {_TYPE_KEY: name}
    for field in dataclasses.fields(spec):
      if field.compare:  # Masks are run-time state, not part of the spec.
        out[field.name] = to_jsonable(getattr(spec, field.name))
    return out
  if isinstance(spec, tuple):
    return {_TUPLE_KEY: [to_jsonable(v) for v in spec]}
  if isinstance(spec, list):
    return [to_jsonable(v) for v in spec]
  if isinstance(spec, dict):
    if not all(isinstance(k, str) for k in spec):
      raise TypeError('only dicts with string keys can be serialised')
    return {_DICT_KEY: {k: to_jsonable(v) for k, v in spec.items()}}
  raise TypeError(f'cannot serialise a {type(spec).__name__}')


def from_jsonable(value: Any) -> Any:
  """Inverse of `to_jsonable`.

  Raises:
    SpecJSONError: for an unknown type name or unexpected fields.
  """
  if isinstance(value, list):
    return [from_jsonable(v) for v in value]
  if not isinstance(value, dict):
    return value
  if _TUPLE_KEY in value:
    return tuple(from_jsonable(v) for v in value[_TUPLE_KEY])
  if _DICT_KEY in value:
    return {k: from_jsonable(v) for k, v in value[_DICT_KEY].items()}
  name = value.get(_TYPE_KEY)
  if name not in _SPEC_TYPES:
    raise SpecJSONError(
        f'unknown spec type {name!r}; valid: {", ".join(registered_types())}')
  cls = _SPEC_TYPES[name]
  kwargs = {k: from_jsonable(v) for k, v in value.items() if k != _TYPE_KEY}
  valid = {f.name for f in dataclasses.fields(cls) if f.compare}
  unknown = sorted(set(kwargs) - valid)
  if unknown:
    raise SpecJSONError(
        f'unknown field(s) {unknown} for spec type {name}; '
        f'valid: {sorted(valid)}')
  try:
    return cls(**kwargs)
  except (TypeError, ValueError) as e:
    raise SpecJSONError(f'bad {name} in spec JSON: {e}') from None


def dumps(spec: Any, indent: int = None) -> str:
  """Serialises a spec to a JSON string."""
  return json.dumps(to_jsonable(spec), indent=indent, sort_keys=True)


def loads(text: str) -> Any:
  """Parses a spec from a JSON string.

  Raises:
    SpecJSONError: for malformed JSON or unknown spec types.
  """
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise SpecJSONError(f'malformed spec JSON: {e}') from None
  return from_jsonable(value)
