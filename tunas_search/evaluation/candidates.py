"""The candidates of a search evaluation and where their costs must lie.

Candidates are: each search's final architecture (`selection`), uniformly
random architectures in the cost window around the searches' target (TuNAS's
random-search control, docs/method.md section 7), random architectures in a
window around each searched architecture's own cost when that lies outside
the target's window (so that a search that overshoots its target is not
credited for a larger budget), registered reference networks of the searched
space (e.g. ProxylessNAS-Mobile, 84.4 ms on the Pixel-1 model) and
architectures a user lists in a file.
No TensorFlow: this module only samples and scores costs.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tunas_search.space import architecture
from tunas_search.search import random_search
from tunas_search.cost_models import CostContext, CostModel

SEARCHED, RANDOM, OWN_COST, EXTRA = 'searched', 'random', 'random_own_cost', 'extra'
REFERENCE = 'reference'
KINDS = (SEARCHED, RANDOM, OWN_COST, EXTRA, REFERENCE)
# Streams of `derived_seed`: one per use, so that adding candidates of one
# kind never changes those of another.
_RANDOM_STREAM, _OWN_COST_STREAM, _TRAIN_STREAM = 1, 2, 3


class CandidateError(ValueError):
  """Bad candidates: an unreachable window, an unreadable architecture."""


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One architecture to score one-shot and train stand-alone.

  Attributes:
    id: a stable name, safe as a directory name (`searched-0-in_window`,
      `random-03`, `own-1-02`, `extra-00`, `ref-proxylessnas_mobile`).
    kind: one of KINDS.
    architecture: the canonical architecture string.
    block_string: the pruned architecture as a block string.
    cost: its cost under the searches' cost model, None without one.
    search: for `searched` and `random_own_cost`: the index of the search
      (in the order the searches were given), else None.
    rules: for `searched`: the final-architecture rules that return it.
    window: for the random kinds: the cost window it was drawn in.
  """
  id: str
  kind: str
  architecture: str
  block_string: str
  cost: Optional[float]
  search: Optional[int] = None
  rules: Tuple[str, ...] = ()
  window: Optional[Tuple[float, float]] = None

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> 'Candidate':
    values = dict(values)
    values['rules'] = tuple(values.get('rules', ()))
    if values.get('window') is not None:
      values['window'] = tuple(values['window'])
    return cls(**values)


def derived_seed(seed: int, stream: int, index: int = 0) -> int:
  """A seed for one use of `seed`: independent streams from one number."""
  state = np.random.SeedSequence([seed, stream, index]).generate_state(
      2, np.uint32)
  return int(state[0]) << 31 | int(state[1]) >> 1  # 0 .. 2^63 - 1


def training_seed(seed: int, run: int) -> int:
  """The training seed of a candidate's `run`-th stand-alone run."""
  return derived_seed(seed, _TRAIN_STREAM, run)


def window_around(cost: float, relative: float) -> Tuple[float, float]:
  """[cost (1 - relative), cost (1 + relative)]."""
  return cost * (1.0 - relative), cost * (1.0 + relative)


def inside(cost: Optional[float], window: Tuple[float, float]) -> bool:
  return cost is not None and window[0] <= cost <= window[1]


def _to_candidates(samples: Sequence[random_search.Sample], kind: str,
                   prefix: str, window: Tuple[float, float],
                   search: Optional[int] = None) -> List[Candidate]:
  return [Candidate(id=f'{prefix}-{i:02d}', kind=kind,
                    architecture=s.architecture, block_string=s.block_string,
                    cost=float(s.cost), search=search,
                    window=(float(window[0]), float(window[1])))
          for i, s in enumerate(samples)]


def _draw(spec, cost_model, context, window, num, seed, max_attempts,
          what: str) -> List[random_search.Sample]:
  try:
    return random_search.sample(
        spec, cost_model, context, num_samples=num, min_cost=window[0],
        max_cost=window[1], seed=seed, max_attempts=max_attempts)
  except random_search.RandomSearchError as e:
    raise CandidateError(f'{what}: {e}') from None


def random_candidates(spec: Any, cost_model: CostModel, context: CostContext,
                      window: Tuple[float, float], num: int, seed: int,
                      max_attempts: int) -> List[Candidate]:
  """`num` uniformly random architectures in `window` (`random-NN`).

  Raises:
    CandidateError: if the window is empty or unreachable, or not filled
      within `max_attempts` draws.
  """
  if num == 0:
    return []
  samples = _draw(spec, cost_model, context, window, num,
                  derived_seed(seed, _RANDOM_STREAM), max_attempts,
                  f'random architectures in {window[0]:.4g}-{window[1]:.4g} '
                  f'{cost_model.unit}')
  return _to_candidates(samples, RANDOM, 'random', window)


def own_cost_candidates(spec: Any, cost_model: CostModel,
                        context: CostContext, searched: Sequence[Candidate],
                        target_window: Tuple[float, float], relative: float,
                        num: int, seed: int,
                        max_attempts: int) -> List[Candidate]:
  """Random architectures at the cost of each search that missed the window.

  For every search (by `Candidate.search`) with a searched candidate whose
  cost lies outside `target_window`, `num` uniformly random architectures
  in `window_around(that cost, relative)` (`own-<search>-NN`); for a search
  with several such candidates, around the costliest. Each search draws
  from its own seed stream.
  """
  out = []
  by_search: Dict[int, float] = {}
  for c in searched:
    if c.cost is not None and not inside(c.cost, target_window):
      by_search[c.search] = max(c.cost, by_search.get(c.search, c.cost))
  for index, cost in sorted(by_search.items()):
    window = window_around(cost, relative)
    if num == 0:
      continue
    samples = _draw(spec, cost_model, context, window, num,
                    derived_seed(seed, _OWN_COST_STREAM, index), max_attempts,
                    f'random architectures at the cost of search {index} '
                    f'({window[0]:.4g}-{window[1]:.4g} {cost_model.unit})')
    out += _to_candidates(samples, OWN_COST, f'own-{index}', window,
                          search=index)
  return out


def architecture_lines(text: str) -> Tuple[str, ...]:
  """The architecture strings of a file: one per line; blank lines and `#`
  comments skipped."""
  lines = (line.split('#', 1)[0].strip() for line in text.splitlines())
  return tuple(line for line in lines if line)


def parse_architectures(lines: Sequence[str], spec: Any
                        ) -> List[List[int]]:
  """Canonical indices of the user's architecture strings.

  Raises:
    CandidateError: naming the first string that is not an architecture of
      `spec`.
  """
  out = []
  for number, line in enumerate(lines, start=1):
    try:
      out.append(architecture.canonicalize(
          spec, architecture.parse_indices(line, spec)))
    except architecture.ArchitectureError as e:
      raise CandidateError(f'extra architecture {number} ({line[:40]}): '
                           f'{e}') from None
  return out


def extra_candidates(spec: Any, indices: Sequence[Sequence[int]],
                     cost_model: Optional[CostModel],
                     context: Optional[CostContext]) -> List[Candidate]:
  """The user's architectures (`extra-NN`), costed like the others."""
  return [Candidate(
      id=f'extra-{i:02d}', kind=EXTRA,
      architecture=architecture.format_indices(ix),
      block_string=architecture.block_string(architecture.prune(spec, ix)),
      cost=None if cost_model is None else float(
          cost_model.cost(spec, ix, context)))
          for i, ix in enumerate(indices)]


def searched_candidate(spec: Any, search: int, rules: Sequence[str],
                       indices: Sequence[int],
                       cost: Optional[float]) -> Candidate:
  """A search's final architecture under `rules` (`searched-<search>-<rule>`)."""
  return Candidate(
      id=f'searched-{search}-{rules[0]}', kind=SEARCHED,
      architecture=architecture.format_indices(indices),
      block_string=architecture.block_string(architecture.prune(spec,
                                                                indices)),
      cost=cost, search=search, rules=tuple(rules))


def reference_candidates(spec: Any, search_space: str,
                         references: Sequence[Sequence[str]],
                         cost_model: Optional[CostModel],
                         context: Optional[CostContext]) -> List[Candidate]:
  """Reference networks of the searched space (`ref-<name>`).

  Args:
    spec: the searched model spec.
    search_space: the searched space's name.
    references: (name, space, architecture) of each network, as
      `bin/evaluate_search.py` reads them from the registry: the space it is
      a pruning of and its architecture string there.

  Raises:
    CandidateError: naming a network of another space, or one that is not an
      architecture of `spec`.
  """
  out = []
  for name, space, arch in references:
    if space != search_space:
      raise CandidateError(
          f'reference net {name!r} is an architecture of {space}, not of '
          f'the searched space {search_space}')
    (indices,) = parse_architectures([arch], spec)
    out.append(Candidate(
        id=f'ref-{name}', kind=REFERENCE,
        architecture=architecture.format_indices(indices),
        block_string=architecture.block_string(architecture.prune(spec,
                                                                  indices)),
        cost=None if cost_model is None else float(
            cost_model.cost(spec, indices, context))))
  return out
