"""Search-space language: decisions (OneOf), tags and deterministic traversal.

A model spec is a tree of frozen dataclasses, lists, tuples, dicts and scalars
in which some nodes are `OneOf` decisions. Every decision has a stable path
(`blocks/2/layers/1/layer/choices/0/kernel_size`) and a per-tag name
(`op_indices_7`), both fixed by one traversal order (docs/method.md section 1):
depth first, dataclass fields in declaration order, list items in order, dict
keys sorted, and the choices of a OneOf (with everything nested inside them)
before the OneOf itself. This module does not import TensorFlow.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

from tunas_search.space import serialization

# Decision tags (docs/method.md section 1). `op` decisions pick an operation (kernel
# size, skip, squeeze-excite); `filters` decisions pick a width.
OP = 'op'
FILTERS = 'filters'
TAGS = (OP, FILTERS)

_SCALARS = (int, float, bool, str, bytes, type(None))


@serialization.register
@dataclasses.dataclass(frozen=True)
class OneOf:
  """A decision: exactly one of `choices` is used.

  Attributes:
    choices: the ordered choices; each may itself contain decisions.
    tag: `OP` or `FILTERS`.
    mask: optional selection, one entry per choice: a one-hot numpy vector for
      a fixed architecture, a float tensor during search (one-hot, or uniform
      during op warmup). Not part of equality or serialisation.
  """
  choices: Tuple[Any, ...]
  tag: str
  mask: Any = dataclasses.field(default=None, compare=False, repr=False)

  def __post_init__(self):
    object.__setattr__(self, 'choices', tuple(self.choices))
    if not self.choices:
      raise ValueError('OneOf needs at least one choice')
    if self.tag not in TAGS:
      raise ValueError(f'unknown decision tag {self.tag!r}; valid: {TAGS}')


class Decision(NamedTuple):
  """One decision of a spec, as found by `decisions()`.

  Attributes:
    index: position in traversal order (the architecture-string position).
    path: stable slash-separated path of the OneOf in the spec.
    tag: the decision's tag.
    tag_index: position among the decisions with the same tag.
    num_choices: number of choices.
    parents: (decision index, choice index) of every enclosing decision, outer
      first: this decision matters only when all those choices are selected.
    oneof: the OneOf node itself.
  """
  index: int
  path: str
  tag: str
  tag_index: int
  num_choices: int
  parents: Tuple[Tuple[int, int], ...]
  oneof: OneOf

  @property
  def tag_name(self) -> str:
    """Per-tag counter name, e.g. `op_indices_7` (docs/method.md section 1)."""
    return f'{self.tag}_indices_{self.tag_index}'


def children(node: Any) -> List[Tuple[str, Any]]:
  """(path segment, child) pairs of a non-OneOf node, in traversal order."""
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    return [(f.name, getattr(node, f.name)) for f in dataclasses.fields(node)]
  if isinstance(node, (list, tuple)):
    return [(str(i), item) for i, item in enumerate(node)]
  if isinstance(node, dict):
    return [(str(k), node[k]) for k in sorted(node)]
  return []


def _rebuild(node: Any, new_children: List[Any]) -> Any:
  """Returns `node` with its children replaced, in `_children` order."""
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    names = [f.name for f in dataclasses.fields(node)]
    return dataclasses.replace(node, **dict(zip(names, new_children)))
  if isinstance(node, tuple) and hasattr(node, '_fields'):
    return type(node)(*new_children)
  if isinstance(node, (list, tuple)):
    return type(node)(new_children)
  if isinstance(node, dict):
    return dict(zip(sorted(node), new_children))
  return node


def _join(path: Sequence[str]) -> str:
  return '/'.join(path)


def map_oneofs(fn: Callable[[str, OneOf], Any], spec: Any) -> Any:
  """Rebuilds `spec` with every OneOf replaced by `fn(path, oneof)`.

  Choices are mapped before their OneOf (children before parents), so `fn`
  sees a OneOf whose choices are already mapped. Calls happen in traversal
  order, so a stateful `fn` can consume an architecture string left to right.

  Args:
    fn: called with the OneOf's path and the OneOf (choices mapped).
    spec: the model spec.

  Returns:
    The rebuilt spec.
  """
  def walk(node, path):
    if isinstance(node, OneOf):
      choices = [walk(c, path + ['choices', str(i)])
                 for i, c in enumerate(node.choices)]
      return fn(_join(path), dataclasses.replace(node, choices=tuple(choices)))
    if isinstance(node, _SCALARS):
      return node
    kids = children(node)
    if not kids:
      return node
    return _rebuild(node, [walk(child, path + [seg]) for seg, child in kids])
  return walk(spec, [])


def decisions(spec: Any) -> List[Decision]:
  """Lists the decisions of `spec` in traversal order.

  Args:
    spec: a model spec.

  Returns:
    One `Decision` per OneOf, children before parents.
  """
  found = []  # (path, oneof, parent (path, choice) pairs)

  def walk(node, path, parents):
    if isinstance(node, OneOf):
      here = _join(path)
      for i, choice in enumerate(node.choices):
        walk(choice, path + ['choices', str(i)], parents + [(here, i)])
      found.append((here, node, parents))
      return
    for seg, child in children(node):
      walk(child, path + [seg], parents)

  walk(spec, [], [])
  index_of = {path: i for i, (path, _, _) in enumerate(found)}
  tag_counts: Dict[str, int] = {}
  result = []
  for i, (path, oneof, parents) in enumerate(found):
    tag_index = tag_counts.get(oneof.tag, 0)
    tag_counts[oneof.tag] = tag_index + 1
    result.append(Decision(
        index=i, path=path, tag=oneof.tag, tag_index=tag_index,
        num_choices=len(oneof.choices),
        parents=tuple((index_of[p], c) for p, c in parents), oneof=oneof))
  return result


def with_masks(spec: Any, masks: Sequence[Any]) -> Any:
  """Attaches one mask per decision, in traversal order.

  Args:
    spec: a model spec.
    masks: one mask per decision (numpy vectors or tensors).

  Returns:
    The spec with `OneOf.mask` set everywhere.

  Raises:
    ValueError: if the number of masks differs from the number of decisions.
  """
  masks = list(masks)
  used = 0

  def attach(_, oneof):
    nonlocal used
    used += 1
    if used <= len(masks):
      return dataclasses.replace(oneof, mask=masks[used - 1])
    return oneof

  masked = map_oneofs(attach, spec)
  if used != len(masks):
    raise ValueError(f'got {len(masks)} masks for {used} decisions')
  return masked


def log10_space_size(spec: Any) -> float:
  """log10 of the product of every decision's number of choices."""
  return sum(math.log10(d.num_choices) for d in decisions(spec))
