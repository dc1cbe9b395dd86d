"""Random-search baseline: uniform architectures inside a cost window.

The TuNAS paper's control (docs/method.md section 7): sample architectures uniformly
(every decision independently) and keep those whose estimated cost falls in a
window around the target, e.g. 83-85 ms of simulated Pixel-1 latency.
Rejection sampling with a bounded number of attempts; a window that no
architecture can reach fails at once instead of looping.
"""

import dataclasses
import math
from typing import Any, List, Optional, Tuple

from absl import logging
import numpy as np

from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search.config import validation as config_rules
from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.cost_models import CostContext, CostModel

DEFAULT_MAX_ATTEMPTS = config_rules.MAX_RANDOM_ATTEMPTS
_LOG_EVERY_ATTEMPTS = 2000


class RandomSearchError(ValueError):
  """The cost window is invalid, unreachable or too rare to fill."""


@dataclasses.dataclass(frozen=True)
class Sample:
  """One accepted architecture.

  Attributes:
    indices: canonical choice indices.
    architecture: `indices` as an architecture string.
    block_string: the pruned architecture as a block string.
    cost: its estimated cost, in the cost model's unit.
  """
  indices: List[int]
  architecture: str
  block_string: str
  cost: float

  def to_dict(self) -> dict:
    """The JSON form: architecture, block_string and cost."""
    return {'architecture': self.architecture,
            'block_string': self.block_string, 'cost': self.cost}


def smallest(spec: Any) -> List[int]:
  """The smallest network of a space: `Zero` (skip) wherever it is a choice,
  else the first choice (choices are ordered small to large in the TuNAS
  spaces; see `architecture.largest`)."""
  out = []
  for d in schema.decisions(spec):
    zeros = [i for i, c in enumerate(d.oneof.choices)
             if isinstance(c, specs.Zero)]
    out.append(zeros[0] if zeros else 0)
  return architecture.canonicalize(spec, out)


def cost_range(spec: Any, cost_model: CostModel,
               context: CostContext) -> Tuple[float, float]:
  """Costs of the smallest and largest networks: the reachable range.

  Exact for costs that grow with every choice's size (params, madds, and the
  Pixel-1 latency model up to its fitting noise).
  """
  costs = [cost_model.cost(spec, indices, context)
           for indices in (smallest(spec), architecture.largest(spec))]
  return min(costs), max(costs)


def _describe_window(min_cost: Optional[float],
                     max_cost: Optional[float]) -> str:
  low = '-inf' if min_cost is None else f'{min_cost:g}'
  high = 'inf' if max_cost is None else f'{max_cost:g}'
  return f'[{low}, {high}]'


def _check_arguments(num_samples: int, min_cost: Optional[float],
                     max_cost: Optional[float], max_attempts: int,
                     seed: Optional[int]) -> None:
  try:
    config_lib.check_seed(seed)
  except config_lib.ConfigError as e:
    raise RandomSearchError(str(e)) from None
  if num_samples < 1:
    raise RandomSearchError(f'num_samples must be at least 1, got '
                            f'{num_samples}')
  if max_attempts < num_samples:
    raise RandomSearchError(f'max_attempts ({max_attempts}) must be at least '
                            f'num_samples ({num_samples})')
  for name, value in (('min_cost', min_cost), ('max_cost', max_cost)):
    if value is not None and not math.isfinite(value):
      raise RandomSearchError(f'{name} must be finite, got {value}')
  if min_cost is not None and max_cost is not None and min_cost > max_cost:
    raise RandomSearchError(f'empty cost window: min_cost {min_cost:g} is '
                            f'above max_cost {max_cost:g}')


def sample(spec: Any, cost_model: CostModel, context: CostContext, *,
           num_samples: int = 1, min_cost: Optional[float] = None,
           max_cost: Optional[float] = None, seed: Optional[int] = None,
           max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> List[Sample]:
  """Uniformly random architectures whose cost is in [min_cost, max_cost].

  Every decision is drawn independently and uniformly (as
  `architecture.random_indices`), then canonicalised; the architecture is
  kept when its cost lies in the window. The same seed gives the same
  samples. Architectures are drawn with replacement (the TuNAS spaces hold
  over 10^20 of them, so repeats do not happen in practice).

  Args:
    spec: the search space's model spec.
    cost_model: the cost model defining the window's unit.
    context: the cost model's context (space name, image size, ...).
    num_samples: how many architectures to return.
    min_cost: lower end of the window, None for no lower bound.
    max_cost: upper end of the window, None for no upper bound.
    seed: seed of the numpy generator; None for a fresh one.
    max_attempts: give up after drawing this many architectures.

  Returns:
    `num_samples` samples, in the order they were drawn.

  Raises:
    RandomSearchError: if the window is empty, outside the costs of the
      space, or not filled within `max_attempts` draws.
  """
  _check_arguments(num_samples, min_cost, max_cost, max_attempts, seed)
  if not cost_model.applies(context.space_name, spec):
    raise RandomSearchError(f'cost model {cost_model.name!r} does not apply '
                            f'to search space {context.space_name!r}')
  window = _describe_window(min_cost, max_cost)
  unit = cost_model.unit
  low, high = cost_range(spec, cost_model, context)
  if (min_cost is not None and min_cost > high) or (
      max_cost is not None and max_cost < low):
    raise RandomSearchError(
        f'no architecture of {context.space_name} costs {window} {unit} '
        f'under {cost_model.name}: costs range from {low:.4g} (smallest '
        f'network) to {high:.4g} (largest)')
  rng = np.random.default_rng(seed)
  accepted, seen = [], []
  for attempt in range(1, max_attempts + 1):
    indices = architecture.canonicalize(
        spec, architecture.random_indices(spec, rng))
    cost = cost_model.cost(spec, indices, context)
    seen.append(cost)
    if ((min_cost is None or cost >= min_cost) and
        (max_cost is None or cost <= max_cost)):
      accepted.append(Sample(
          indices, architecture.format_indices(indices),
          architecture.block_string(architecture.prune(spec, indices)),
          cost))
      if len(accepted) == num_samples:
        return accepted
    if attempt % _LOG_EVERY_ATTEMPTS == 0:
      logging.info('random search: %d of %d architectures in %s %s after %d '
                   'attempts', len(accepted), num_samples, window, unit,
                   attempt)
  raise RandomSearchError(
      f'found {len(accepted)} of {num_samples} architectures costing '
      f'{window} {unit} in {max_attempts} attempts; uniform samples cost '
      f'{np.min(seen):.4g} to {np.max(seen):.4g} (median '
      f'{np.median(seen):.4g}): widen the window or raise max_attempts')
