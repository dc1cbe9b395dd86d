"""What a search returns, and how settled its controller is.

TuNAS returns the argmax of every decision's logits (docs/method.md section
7). Once the controller has settled, that is the architecture it samples
almost always, and its cost is the one the absolute reward steered towards.
Before it has settled (a short search), each decision's distribution is
broad and the per-decision argmax is an architecture the controller rarely
samples: every decision that leans slightly one way is taken fully that way,
so the argmax can cost far more (or less) than the architectures whose
rewards trained the controller (docs/evaluate_search.md, "Landing on the
target", has the measurements).

This module scores a controller's distribution without TensorFlow (the
probabilities come from `analysis.analyze`):
  * `settling`: the entropy of the whole distribution against a uniform
    controller's, each decision's largest probability, the probability of
    the argmax, and the costs of architectures sampled from the controller;
  * `choose`: the architecture a rule returns: `argmax` (TuNAS), `in_window`
    (the most probable of the argmax and a seeded sample of the
    controller's architectures whose cost lies in the target's window; when
    none does, the one nearest the target: `nearest`), or `auto` (the argmax
    when it lies in the window, else `in_window`).
"""

import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tunas_search import cost_models
from tunas_search.config import validation as config_rules
from tunas_search.cost_models import CostContext, CostModel
from tunas_search.space import architecture
from tunas_search.space import schema

# The rules and their defaults are config choices (config/validation.py).
ARGMAX, IN_WINDOW, AUTO = (config_rules.ARGMAX, config_rules.IN_WINDOW,
                           config_rules.AUTO)
RULES = config_rules.SELECTION_RULES
RELATIVE_WINDOW = config_rules.RELATIVE_WINDOW
NUM_SAMPLES = config_rules.SELECTION_SAMPLES
# What `in_window` falls back to when no candidate lies in the window: the
# candidate nearest the target (`Choice.resolved`).
NEAREST = 'nearest'
# A decision whose largest probability reaches this counts as settled.
SETTLED_PROBABILITY = 0.9


class SelectionError(ValueError):
  """The rule cannot be applied (e.g. `in_window` without a cost target)."""


def window(target: float, relative: float = RELATIVE_WINDOW
           ) -> Tuple[float, float]:
  """[target (1 - relative), target (1 + relative)]: 83.0-85.0 ms at 84."""
  return target * (1.0 - relative), target * (1.0 + relative)


def _active(decisions: Sequence[schema.Decision],
            indices: Sequence[int]) -> List[bool]:
  return [all(indices[p] == c for p, c in d.parents) for d in decisions]


def log_probability(decisions: Sequence[schema.Decision],
                    probabilities: Sequence[np.ndarray],
                    indices: Sequence[int]) -> float:
  """log P(architecture): the sum over the decisions that matter in it.

  A decision nested under an unselected choice does not change the network,
  so it adds nothing (docs/method.md section 5, hierarchical log-prob).
  """
  total = 0.0
  for d, probs, on in zip(decisions, probabilities,
                          _active(decisions, indices)):
    if on:
      total += math.log(max(float(probs[indices[d.index]]), 1e-300))
  return total


def entropy(decisions: Sequence[schema.Decision],
            probabilities: Sequence[np.ndarray]) -> float:
  """The entropy (nats) of the distribution over networks.

  Each decision's entropy weighted by the probability that it matters (the
  product of its parents' choices' probabilities): the chain rule for a
  tree of independent decisions.
  """
  total = 0.0
  for d, probs in zip(decisions, probabilities):
    weight = 1.0
    for parent, choice in d.parents:
      weight *= float(probabilities[parent][choice])
    p = np.asarray(probs, dtype=np.float64)
    p = p[p > 0]
    total += weight * float(-np.sum(p * np.log(p)))
  return total


def uniform(decisions: Sequence[schema.Decision]) -> List[np.ndarray]:
  """The controller at initialisation: every choice equally likely."""
  return [np.full(d.num_choices, 1.0 / d.num_choices) for d in decisions]


def sample(spec: Any, probabilities: Sequence[np.ndarray], num_samples: int,
           seed: int) -> List[List[int]]:
  """Canonical architectures drawn from the controller's distribution.

  Every decision is drawn independently from its probabilities, as the
  controller samples (docs/method.md section 5), then the decisions under
  an unselected choice are set to 0 (`architecture.canonicalize`); the same
  seed gives the same architectures.
  """
  decisions = schema.decisions(spec)
  if len(probabilities) != len(decisions):
    raise SelectionError(f'{len(probabilities)} probability vectors for '
                         f'{len(decisions)} decisions')
  rng = np.random.default_rng(seed)
  columns = []
  for probs in probabilities:
    cumulative = np.cumsum(np.asarray(probs, dtype=np.float64))
    draws = rng.random(num_samples) * cumulative[-1]
    columns.append(np.minimum(np.searchsorted(cumulative, draws, 'right'),
                              len(cumulative) - 1))
  drawn = np.stack(columns, axis=1).astype(np.int64)
  rows = drawn.copy()
  for d in decisions:
    for parent, choice in d.parents:
      rows[drawn[:, parent] != choice, d.index] = 0
  return rows.tolist()


@dataclasses.dataclass(frozen=True)
class Settling:
  """How settled a controller is.

  Attributes:
    entropy: entropy of its distribution over networks, in nats.
    uniform_entropy: the same for a uniform controller (the start).
    decisions: decisions with more than one choice.
    settled_decisions: of those, how many put >= SETTLED_PROBABILITY on one
      choice.
    min_max_probability: the smallest of the decisions' largest
      probabilities.
    median_max_probability: their median.
    argmax_log_probability: log-probability of the argmax architecture.
    argmax_cost: its cost; None without a cost model.
    num_samples: architectures sampled from the controller.
    sampled_costs: mean, std, p5, p50, p95 of their costs; None without a
      cost model.
    in_window_fraction: the fraction of them in the cost window; None
      without a target.
    argmax_cost_percentile: % of sampled costs below the argmax's cost.
  """
  entropy: float
  uniform_entropy: float
  decisions: int
  settled_decisions: int
  min_max_probability: float
  median_max_probability: float
  argmax_log_probability: float
  argmax_cost: Optional[float]
  num_samples: int
  sampled_costs: Optional[Dict[str, float]]
  in_window_fraction: Optional[float]
  argmax_cost_percentile: Optional[float]

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Choice:
  """The architecture a rule returns.

  Attributes:
    rule: the rule asked for.
    resolved: what the rule became: `argmax`, `in_window` (a candidate in
      the window), or `nearest` (in_window found none in the window and
      took the candidate nearest the target).
    label: `rule`, or `rule -> resolved` where they differ (`auto ->
      nearest`), as logs and reports name the choice.
    indices: canonical choice indices.
    architecture: `indices` as an architecture string.
    cost: its cost, None without a cost model.
    log_probability: its log-probability under the controller.
    window: the target's cost window, None without a target.
    in_window: whether `cost` lies in `window` (None without a target).
    settling: how settled the controller is.
  """
  rule: str
  resolved: str
  indices: List[int]
  architecture: str
  cost: Optional[float]
  log_probability: float
  window: Optional[Tuple[float, float]]
  in_window: Optional[bool]
  settling: Settling

  @property
  def label(self) -> str:
    return (self.rule if self.resolved == self.rule
            else f'{self.rule} -> {self.resolved}')

  def to_dict(self) -> Dict[str, Any]:
    out = dataclasses.asdict(self)
    out['settling'] = self.settling.to_dict()
    out['label'] = self.label
    return out


def _cost_summary(costs: np.ndarray) -> Dict[str, float]:
  p5, p50, p95 = np.percentile(costs, [5, 50, 95])
  return {'mean': float(costs.mean()), 'std': float(costs.std()),
          'p5': float(p5), 'p50': float(p50), 'p95': float(p95)}


def _inside(cost: float, bounds: Tuple[float, float]) -> bool:
  return bool(bounds[0] <= cost <= bounds[1])


class Distribution:
  """A controller's distribution over networks, scored once.

  Attributes:
    settling: how settled the controller is.
  """

  def __init__(self, spec: Any, probabilities: Sequence[np.ndarray], *,
               cost_model: Optional[CostModel] = None,
               context: Optional[CostContext] = None,
               target: Optional[float] = None,
               relative_window: float = RELATIVE_WINDOW,
               bounds: Optional[Tuple[float, float]] = None,
               num_samples: int = NUM_SAMPLES, seed: int = 0):
    """Samples the controller and scores the samples and the argmax.

    Args:
      spec: the searched model spec.
      probabilities: each decision's choice probabilities (softmax of its
        logits), in traversal order.
      cost_model: the search's cost model; None for none.
      context: its context (`cost_models.context_for(search_config)`).
      target: the search's cost target; None for none.
      relative_window: half-width of the window around `target`, relative.
      bounds: the window itself, instead of one around `target`.
      num_samples: architectures to sample from the controller.
      seed: seed of the sample.
    """
    if num_samples < 1:
      raise SelectionError(f'num_samples must be at least 1, got '
                           f'{num_samples}')
    self._decisions = schema.decisions(spec)
    self._probabilities = [np.asarray(p, np.float64) for p in probabilities]
    self._has_cost = cost_model is not None and target is not None
    self._target = target
    self.window = None
    if self._has_cost:
      self.window = tuple(bounds) if bounds else window(target,
                                                        relative_window)
    cost_of = _cached_cost(spec, cost_model, context)
    self._argmax = architecture.canonicalize(
        spec, [int(np.argmax(p)) for p in self._probabilities])
    self._argmax_cost = cost_of(self._argmax)
    self._samples = sample(spec, self._probabilities, num_samples, seed)
    self._costs = (np.array([cost_of(ix) for ix in self._samples])
                   if cost_model is not None and self._samples else None)
    self.settling = _settling(self._decisions, self._probabilities,
                              self._argmax, self._costs, self.window,
                              self._argmax_cost, num_samples)

  def choose(self, rule: str) -> Choice:
    """The architecture `rule` returns.

    `in_window` takes, among the argmax and the sampled architectures whose
    cost lies in the window, the most probable; if none lies in it, the one
    nearest the target (the more probable of equally near ones), resolved as
    `nearest`. `auto` is `argmax` when the argmax lies in the window (or
    there is no target), else `in_window` (or `nearest`).

    Raises:
      SelectionError: for an unknown rule, or `in_window` without a cost
        model and target.
    """
    if rule not in RULES:
      raise SelectionError(f'unknown final architecture rule {rule!r}; '
                           f'valid choices: {", ".join(RULES)}')
    if rule == IN_WINDOW and not self._has_cost:
      raise SelectionError('final architecture rule in_window needs a cost '
                           'model and a cost target; use argmax')
    resolved = rule
    if rule == AUTO:
      resolved = (IN_WINDOW if self._has_cost and
                  not _inside(self._argmax_cost, self.window) else ARGMAX)
    indices, cost = self._argmax, self._argmax_cost
    if resolved == IN_WINDOW:
      indices, cost = _most_probable_in_window(
          self._decisions, self._probabilities,
          [self._argmax] + self._samples,
          [self._argmax_cost] + list(self._costs), self.window, self._target)
      if not _inside(cost, self.window):
        resolved = NEAREST
    return Choice(
        rule=rule, resolved=resolved, indices=indices,
        architecture=architecture.format_indices(indices),
        cost=None if cost is None else float(cost),
        log_probability=log_probability(self._decisions,
                                         self._probabilities, indices),
        window=self.window,
        in_window=None if self.window is None else _inside(cost,
                                                           self.window),
        settling=self.settling)


def _cached_cost(spec: Any, cost_model: Optional[CostModel],
                 context: Optional[CostContext]):
  """`indices -> cost` (None without a cost model), each architecture
  costed once: a settled controller samples few distinct ones."""
  known: Dict[Tuple[int, ...], Optional[float]] = {}

  def cost_of(indices: List[int]) -> Optional[float]:
    key = tuple(indices)
    if key not in known:
      known[key] = (None if cost_model is None else
                    float(cost_model.cost(spec, indices, context)))
    return known[key]
  return cost_of


def choose(spec: Any, probabilities: Sequence[np.ndarray], rule: str,
           **kwargs) -> Choice:
  """`Distribution(spec, probabilities, **kwargs).choose(rule)`."""
  return Distribution(spec, probabilities, **kwargs).choose(rule)


def for_search(config: Any, spec: Any, result: Any, **kwargs
               ) -> Distribution:
  """A search's controller at the step an analysis read.

  Args:
    config: the search's `SearchConfig` (its cost model, context, target).
    spec: its model spec.
    result: an `analysis.Analysis` of it (each decision's probabilities).
    **kwargs: `relative_window`, `bounds`, `num_samples`, `seed` of
      `Distribution`.
  """
  model = context = target = None
  if config.cost_model != cost_models.NONE:
    model = cost_models.get(config.cost_model)
    context = cost_models.context_for(config)
    target = config.rl_cost_model_target
  return Distribution(spec, [d.probabilities for d in result.decisions],
                      cost_model=model, context=context, target=target,
                      **kwargs)


def _most_probable_in_window(decisions, probabilities, candidates, costs,
                             bounds, target) -> Tuple[List[int], float]:
  scored = [(log_probability(decisions, probabilities, ix), ix, c)
            for ix, c in zip(candidates, costs)]
  inside = [s for s in scored if _inside(s[2], bounds)]
  if inside:
    best = max(inside, key=lambda s: s[0])
  else:
    best = min(scored, key=lambda s: (abs(s[2] - target), -s[0]))
  return best[1], best[2]


def _settling(decisions, probabilities, argmax, costs, bounds, argmax_cost,
              num_samples) -> Settling:
  multi = [np.asarray(p) for d, p in zip(decisions, probabilities)
           if d.num_choices > 1]
  maxima = np.array([p.max() for p in multi]) if multi else np.ones(1)
  return Settling(
      entropy=entropy(decisions, probabilities),
      uniform_entropy=entropy(decisions, uniform(decisions)),
      decisions=len(multi),
      settled_decisions=int(np.sum(maxima >= SETTLED_PROBABILITY)) if multi
      else 0,
      min_max_probability=float(maxima.min()),
      median_max_probability=float(np.median(maxima)),
      argmax_log_probability=log_probability(decisions, probabilities,
                                             argmax),
      argmax_cost=None if argmax_cost is None else float(argmax_cost),
      num_samples=num_samples,
      sampled_costs=None if costs is None else _cost_summary(costs),
      in_window_fraction=None if costs is None or bounds is None else float(
          np.mean([(bounds[0] <= c <= bounds[1]) for c in costs])),
      argmax_cost_percentile=None if costs is None else float(
          100.0 * np.mean(costs < argmax_cost)))


def format_cost(value: float) -> str:
  """`85.00` for milliseconds, `6,409,440` for counts: costs of one unit
  read alike in every line."""
  return f'{value:,.0f}' if abs(value) >= 1000 else f'{value:.2f}'


def format_text(choice: Choice, unit: str = '') -> str:
  """A few lines: the rule's choice and how settled the controller is."""
  s = choice.settling
  unit = f' {unit}' if unit else ''
  lines = [f'final architecture ({choice.label}): {choice.architecture}']
  if choice.cost is not None:
    where = ''
    if choice.window is not None:
      where = (f', {"inside" if choice.in_window else "outside"} the window '
               f'{format_cost(choice.window[0])}-'
               f'{format_cost(choice.window[1])}{unit}')
    lines.append(f'  cost {format_cost(choice.cost)}{unit}{where}; '
                 'log-probability '
                 f'{choice.log_probability:.2f}')
  lines.append(
      f'controller: entropy {s.entropy:.1f} nats of {s.uniform_entropy:.1f} '
      f'at the start; {s.settled_decisions} of {s.decisions} decisions at >= '
      f'{SETTLED_PROBABILITY:g} (smallest top probability '
      f'{s.min_max_probability:.2f}, median {s.median_max_probability:.2f}); '
      f'argmax log-probability {s.argmax_log_probability:.2f}')
  if s.sampled_costs is not None:
    c = s.sampled_costs
    line = (f'  {s.num_samples} sampled architectures cost '
            f'{format_cost(c["mean"])} +- {c["std"]:.2g}{unit} (p5 '
            f'{format_cost(c["p5"])}, p95 {format_cost(c["p95"])}); the '
            f'argmax costs {format_cost(s.argmax_cost)}{unit}, '
            f'more than {s.argmax_cost_percentile:.0f}% of them')
    if s.in_window_fraction is not None:
      line += f'; {100 * s.in_window_fraction:.0f}% lie in the window'
    lines.append(line)
  return '\n'.join(lines)
