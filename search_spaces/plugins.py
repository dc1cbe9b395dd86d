"""Search spaces from outside this package: entry points and MODULE:FUNCTION.

Two ways to search a space without forking tunas_search:

* `--search_space=my_pkg.spaces:tiny` imports `my_pkg.spaces` (from the
  Python path or the current directory) only when named, and calls `tiny()`.
* An installed package lists its spaces as entry points of the group
  `tunas_search.search_spaces` (`tiny = my_pkg.spaces:tiny`); their names
  appear in every tool's list of valid names, and a space's module is
  imported only when it is used.

The object named may be a `SearchSpace`, or a function without arguments
returning a `specs.ConvTower` (or a `SearchSpace`). Either way the spec is
checked by `validation.check_spec`, so a malformed one fails with one line
naming its path in the spec.
"""

import functools
import importlib
import importlib.metadata
import os
import sys
from typing import Any, Callable, Dict

ENTRY_POINT_GROUP = 'tunas_search.search_spaces'
# Kinds of origin (SearchSpace.origin).
BUILTIN, PLUGIN, MODULE = 'builtin', 'plugin', 'module'


class SearchSpaceError(ValueError):
  """A user's search space cannot be loaded or fails validation."""


def is_reference_string(name: str) -> bool:
  """Whether `name` has the MODULE:FUNCTION form."""
  module, sep, attribute = name.partition(':')
  return bool(sep and module and attribute)


def entry_points() -> Dict[str, Any]:
  """Entry points of ENTRY_POINT_GROUP by name; nothing is imported."""
  try:
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
  except TypeError:  # Python 3.9: a dict of groups.
    found = importlib.metadata.entry_points().get(ENTRY_POINT_GROUP, ())
  return {ep.name: ep for ep in found}


def _import(module_name: str, reference: str) -> Any:
  """Imports a user's module; the current directory is searched last."""
  cwd = os.getcwd()
  if cwd not in sys.path:
    # As `python -m` would: a module next to the user's files is found
    # even when the tool runs as an installed script.
    sys.path.append(cwd)
  try:
    return importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    if e.name and module_name.startswith(e.name):
      raise SearchSpaceError(
          f'{reference}: no module named {module_name!r} (on the Python path '
          'or in the current directory)') from None
    raise SearchSpaceError(f'{reference}: importing {module_name} failed: '
                           f'{e}') from None
  except Exception as e:  # pylint: disable=broad-except
    raise SearchSpaceError(f'{reference}: importing {module_name} failed: '
                           f'{type(e).__name__}: {e}') from None


def load_reference(reference: str) -> Any:
  """The object `MODULE:ATTRIBUTE` names (ATTRIBUTE may be dotted)."""
  module_name, _, attribute = reference.partition(':')
  target = _import(module_name, reference)
  for part in attribute.split('.'):
    try:
      target = getattr(target, part)
    except AttributeError:
      raise SearchSpaceError(f'{reference}: module {module_name} has no '
                             f'{attribute!r}') from None
  return target


def load_entry_point(name: str, entry_point: Any) -> Any:
  """The object an entry point names; errors name the entry point."""
  try:
    return entry_point.load()
  except Exception as e:  # pylint: disable=broad-except
    raise SearchSpaceError(
        f'search space {name!r} (entry point {entry_point.value} of '
        f'{ENTRY_POINT_GROUP}) cannot be loaded: {type(e).__name__}: {e}'
    ) from None


def call_spec_function(where: str, fn: Callable[[], Any]) -> Any:
  """Calls a user's spec function; its own exceptions become one line."""
  try:
    return fn()
  except Exception as e:  # pylint: disable=broad-except
    raise SearchSpaceError(f'{where}: building the spec failed: '
                           f'{type(e).__name__}: {e}') from None


def cached(fn):
  """Caches the resolution of a name: a module is imported once."""
  return functools.lru_cache(maxsize=None)(fn)
