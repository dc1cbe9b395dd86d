"""Architecture strings: one choice index per decision, and pruning a space.

An architecture string holds one integer per decision of a space, in
traversal order, joined by colons: `0:2:1:...` (SPEC.md section 1). Decisions
nested under an unselected choice still get an index; it is ignored when
building and canonically 0 (COST_MODEL.md section 3).
"""

import dataclasses
from typing import Any, List, Sequence

import numpy as np

from tunas_search import schema
from tunas_search import specs


class ArchitectureError(ValueError):
  """An architecture string does not fit its search space."""


def format_indices(indices: Sequence[int]) -> str:
  """Joins choice indices with colons."""
  return ':'.join(str(int(i)) for i in indices)


def parse_indices(text: str, spec: Any = None) -> List[int]:
  """Parses `a:b:c` and, given a spec, checks it against that spec.

  Args:
    text: the architecture string.
    spec: optional model spec to validate against.

  Returns:
    The indices.

  Raises:
    ArchitectureError: on a non-integer entry, a wrong length or an index out
      of range; the message names the bad value and what was expected.
  """
  tokens = text.strip().split(':') if text.strip() else []
  indices = []
  for pos, token in enumerate(tokens):
    token = token.strip()
    if not token.isdigit():
      raise ArchitectureError(
          f'architecture string entry {pos} is {token!r}; expected a '
          f'non-negative integer (format a:b:c, e.g. 0:2:1)')
    indices.append(int(token))
  if spec is not None:
    validate(spec, indices)
  return indices


def validate(spec: Any, indices: Sequence[int]) -> None:
  """Checks that `indices` has one in-range entry per decision of `spec`.

  Raises:
    ArchitectureError: naming the first problem found.
  """
  decisions = schema.decisions(spec)
  if len(indices) != len(decisions):
    raise ArchitectureError(
        f'architecture has {len(indices)} indices but the search space has '
        f'{len(decisions)} decisions')
  for d, i in zip(decisions, indices):
    if not 0 <= i < d.num_choices:
      raise ArchitectureError(
          f'index {i} at position {d.index} ({d.path}) is out of range; '
          f'valid: 0..{d.num_choices - 1}')


def one_hot_masks(spec: Any, indices: Sequence[int]) -> List[np.ndarray]:
  """One float32 one-hot vector per decision."""
  validate(spec, indices)
  return [np.eye(d.num_choices, dtype=np.float32)[i]
          for d, i in zip(schema.decisions(spec), indices)]


def with_indices(spec: Any, indices: Sequence[int]) -> Any:
  """Returns `spec` with one-hot numpy masks attached to every decision.

  The builder turns such a spec into a stand-alone network of exactly the
  selected widths and ops, with the same variable names as the supernet.
  """
  return schema.with_masks(spec, one_hot_masks(spec, indices))


def prune(spec: Any, indices: Sequence[int]) -> Any:
  """Replaces every decision by its selected choice.

  Args:
    spec: a model spec.
    indices: one index per decision.

  Returns:
    A spec with no OneOf left.

  Raises:
    ArchitectureError: if `indices` does not fit `spec`.
  """
  validate(spec, indices)
  it = iter(indices)
  return schema.map_oneofs(lambda _, oneof: oneof.choices[next(it)], spec)


def canonicalize(spec: Any, indices: Sequence[int]) -> List[int]:
  """Sets indices under unselected choices to 0 (COST_MODEL.md section 3).

  Two architecture strings describe the same network if and only if their
  canonical forms are equal.
  """
  validate(spec, indices)
  out = list(indices)
  for d in schema.decisions(spec):
    if any(indices[p] != c for p, c in d.parents):
      out[d.index] = 0
  return out


def largest(spec: Any) -> List[int]:
  """The largest network of a space: the last choice of every decision,
  except that a `Zero` (skip) choice is never picked.

  In the TuNAS spaces choices are ordered small to large (widths, kernel
  sizes, squeeze-excite off/on), so this is the widest, deepest network with
  the largest kernels. Used as describe_arch's default for a space.
  """
  out = []
  for d in schema.decisions(spec):
    real = [i for i, c in enumerate(d.oneof.choices)
            if not isinstance(c, specs.Zero)]
    out.append(real[-1] if real else 0)
  return out


def random_indices(spec: Any, rng: np.random.Generator) -> List[int]:
  """Uniformly random architecture (every decision sampled independently)."""
  return [int(rng.integers(d.num_choices)) for d in schema.decisions(spec)]


def replace_mask(oneof: schema.OneOf, mask: Any) -> schema.OneOf:
  """A copy of `oneof` carrying `mask`."""
  return dataclasses.replace(oneof, mask=mask)
