"""The cheapest and the dearest architecture of a space under a cost model.

A cost model that sums per-layer terms (`CostModel.additive`: MAdds,
parameters, a measured latency model's linear fit) gives each architecture
of a space without width decisions (nor skips outside a residual) the sum
over its layers of a term that depends on that layer's decisions alone:
every layer's input width and resolution are fixed. The extremes of such a space are then exact: each
layer at its own cheapest (dearest) choices, found by costing every choice
of one layer with the others held fixed, a few hundred cost-model calls
where the space has ~10^12 architectures. Otherwise the same search is an
estimate, and the range says so (`CostRange.exact`).
"""

import dataclasses
import itertools
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.cost_models.base import CostContext, CostModel

# A layer with more joint choices than this is searched one decision at a
# time (an estimate): enough for any UIB, inverted bottleneck or op choice.
MAX_LAYER_CHOICES = 4096


@dataclasses.dataclass(frozen=True)
class CostRange:
  """The costs a space spans.

  Attributes:
    low: the smallest cost found.
    high: the largest cost found.
    low_indices: an architecture of cost `low`.
    high_indices: an architecture of cost `high`.
    exact: whether `low` and `high` are the space's minimum and maximum;
      else they are the extremes of a layer-by-layer search, which may lie
      inside the true range.
  """
  low: float
  high: float
  low_indices: List[int]
  high_indices: List[int]
  exact: bool

  def contains(self, cost: float) -> bool:
    return self.low <= cost <= self.high


def _layer_of(decision: schema.Decision) -> Optional[str]:
  """`blocks/<b>/layers/<i>` of a decision in (or of) a layer, else None."""
  parts = decision.path.split('/')
  if len(parts) >= 4 and parts[0] == 'blocks' and parts[2] == 'layers':
    return '/'.join(parts[:4])
  return None


def _changes_widths(decision: schema.Decision) -> bool:
  """Whether a choice of `decision` may change the input width of the
  layers after it: a width, or a `Zero` outside a `Residual` (which passes
  on its input's width, not the block's)."""
  if decision.tag == schema.FILTERS:
    return True
  skips = any(isinstance(c, specs.Zero) for c in decision.oneof.choices)
  return skips and not decision.path.endswith('/layer')


def _groups(decisions: Sequence[schema.Decision]
            ) -> Tuple[List[List[schema.Decision]], bool]:
  """Decisions grouped by layer, and whether the groups are independent:
  every decision inside a layer, none changing the widths after it."""
  by_layer: Dict[str, List[schema.Decision]] = {}
  for d in decisions:
    by_layer.setdefault(_layer_of(d) or d.path, []).append(d)
  independent = all(_layer_of(d) and not _changes_widths(d)
                    for d in decisions)
  return list(by_layer.values()), independent


def _combinations(group: Sequence[schema.Decision]
                  ) -> Tuple[List[Tuple[int, ...]], bool]:
  """Every joint choice of a layer's decisions (its own index per decision),
  or one decision at a time beyond MAX_LAYER_CHOICES (not exhaustive)."""
  total = 1
  for d in group:
    total *= d.num_choices
  if total <= MAX_LAYER_CHOICES:
    return list(itertools.product(*[range(d.num_choices) for d in group])
                ), True
  singles = []
  for i, d in enumerate(group):
    for c in range(d.num_choices):
      singles.append(tuple(c if j == i else 0 for j in range(len(group))))
  return singles, False


def cost_range(spec: Any, cost_model: CostModel, context: CostContext
               ) -> CostRange:
  """The smallest and largest cost of `spec`'s architectures.

  Exact when the cost model is additive and no decision changes the input
  width of a later layer (module docstring), as in MobileNetV4's fine
  spaces; otherwise each layer's extremes are still combined, and `exact`
  is False.

  Args:
    spec: a model spec (a ConvTower for the shipped cost models).
    cost_model: the cost model.
    context: its context.

  Returns:
    The range, with an architecture at each end.
  """
  decisions = schema.decisions(spec)
  groups, independent = _groups(decisions)
  exact = cost_model.additive and independent
  base = [0] * len(decisions)
  low, high = list(base), list(base)
  for group in groups:
    combos, exhaustive = _combinations(group)
    exact = exact and exhaustive
    costs = []
    for combo in combos:
      indices = list(base)
      for d, c in zip(group, combo):
        indices[d.index] = c
      costs.append((cost_model.cost(spec, indices, context), combo))
    for target, pick in ((low, min), (high, max)):
      _, combo = pick(costs, key=lambda item: item[0])
      for d, c in zip(group, combo):
        target[d.index] = c
  low = architecture.canonicalize(spec, low)
  high = architecture.canonicalize(spec, high)
  return CostRange(cost_model.cost(spec, low, context),
                   cost_model.cost(spec, high, context), low, high, exact)
