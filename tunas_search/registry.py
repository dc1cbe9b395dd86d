"""A small named registry, the one extension mechanism of tunas_search."""

from typing import Callable, Dict, Generic, List, TypeVar

T = TypeVar('T')


class UnknownNameError(ValueError):
  """Raised when a name is not in a registry; the message lists valid names."""


class Registry(Generic[T]):
  """Maps names to objects (usually factories) for one extension point.

  Search spaces, cost models, reward functions and datasets each have one.
  Command-line enum flags take their valid values from `names()`.
  """

  def __init__(self, kind: str):
    """Creates an empty registry.

    Args:
      kind: what the registry holds, used in error messages ("search space").
    """
    self._kind = kind
    self._items: Dict[str, T] = {}

  def register(self, name: str, item: T = None):
    """Registers `item` under `name`; usable as a decorator when item is None.

    Args:
      name: the public name.
      item: the object to register.

    Returns:
      `item`, or a decorator that registers its argument.

    Raises:
      ValueError: if `name` is already registered.
    """
    if item is None:
      def decorator(fn: T) -> T:
        self.register(name, fn)
        return fn
      return decorator
    if name in self._items:
      raise ValueError(f'{self._kind} {name!r} is already registered')
    self._items[name] = item
    return item

  def get(self, name: str) -> T:
    """Returns the object registered under `name`.

    Raises:
      UnknownNameError: naming the bad value and listing the valid ones.
    """
    try:
      return self._items[name]
    except KeyError:
      raise UnknownNameError(
          f'unknown {self._kind} {name!r}; valid choices: '
          f'{", ".join(self.names())}') from None

  def names(self) -> List[str]:
    """Sorted list of registered names."""
    return sorted(self._items)

  def __contains__(self, name: str) -> bool:
    return name in self._items

  def items(self):
    """(name, object) pairs in name order."""
    return [(name, self._items[name]) for name in self.names()]

  def filter(self, predicate: Callable[[str, T], bool]) -> List[str]:
    """Names whose (name, object) satisfy `predicate`."""
    return [n for n, v in self.items() if predicate(n, v)]
