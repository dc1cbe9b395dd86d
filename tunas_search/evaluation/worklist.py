"""The plan of a search evaluation: the searches, the candidates, the work.

The plan is computed once from finished searches (`make`) and written to the
output dir (`plan.json`) with the config; reruns and other shards read it
back, so every machine works on the same candidates. Everything is checked
before anything is written: searches that are not finished or do not agree
on what was searched, and cost windows no random draw reaches, each raise an
`EvaluationError` with one line.
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from tunas_search.results import analysis
from tunas_search import cost_models
from tunas_search.results import selection
from tunas_search.search import retarget
from tunas_search.space import serialization
from tunas_search.config import plan as step_plan_lib
from tunas_search.config import SearchConfig
from tunas_search.evaluation import candidates as candidates_lib
from tunas_search.evaluation.candidates import Candidate
from tunas_search.config.evaluation import BOTH, EvaluationConfig

PLAN_FILENAME = 'plan.json'
# What every search must agree on for their architectures to be compared:
# the searched space and data, the cost model and its target.
SHARED_FIELDS = ('search_space', 'dataset', 'image_size', 'num_classes',
                 'input_channels', 'cost_model', 'cost_model_space',
                 'cost_model_file', 'rl_cost_model_target')


class EvaluationError(ValueError):
  """Bad input to an evaluation; the message is one line saying why."""


@dataclasses.dataclass(frozen=True)
class Search:
  """One finished search.

  Attributes:
    model_dir: its model dir.
    config: its config.
    spec: its model spec.
    result: the analysis of its final checkpoint.
    step_plan: the form its steps took (`config.plan.previous`).
  """
  model_dir: str
  config: SearchConfig
  spec: Any
  result: analysis.Analysis
  step_plan: step_plan_lib.StepPlan


@dataclasses.dataclass(frozen=True)
class Plan:
  """What an evaluation scores and trains.

  Attributes:
    search_space: the searched space.
    cost_model: the searches' cost model ('none' for none).
    unit: its unit ('' without one).
    target: the searches' cost target (None without one).
    window: the target's cost window (None without a target).
    searches: per search: model_dir, step and, per rule, its `Choice`
      (`selection.Choice.to_dict()`), plus the candidate ids it gave.
    candidates: every candidate, searched first.
  """
  search_space: str
  cost_model: str
  unit: str
  target: Optional[float]
  window: Optional[Tuple[float, float]]
  searches: List[Dict[str, Any]]
  candidates: List[Candidate]

  def to_json(self) -> str:
    out = dataclasses.asdict(self)
    out['candidates'] = [c.to_dict() for c in self.candidates]
    return json.dumps(out, indent=1, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> 'Plan':
    values = json.loads(text)
    values['candidates'] = [Candidate.from_dict(c)
                            for c in values['candidates']]
    if values.get('window') is not None:
      values['window'] = tuple(values['window'])
    return cls(**values)


def load_search(model_dir: str) -> Search:
  """A finished search, or an EvaluationError saying why it is not one."""
  try:
    config, spec = analysis.load_search(model_dir)
    result = analysis.analyze(model_dir)
  except analysis.AnalysisError as e:
    raise EvaluationError(f'search model dir {model_dir}: {e}') from None
  if result.step < config.total_steps:
    raise EvaluationError(
        f'search model dir {model_dir} is not finished (step {result.step} '
        f'of {config.total_steps}); evaluate it once it is')
  try:
    # A search whose model dir records no plan resolved 'auto' on a CPU.
    step_plan = (step_plan_lib.previous(model_dir) or
                 step_plan_lib.resolve(config))
  except step_plan_lib.ConfigError as e:
    raise EvaluationError(f'search model dir {model_dir}: {e}') from None
  targets = retarget.targets_of(model_dir)
  if len(targets) > 1:
    # Its config, search_result.json and default controller are the first
    # target's; the others' controllers are read by the front, not here.
    logging.warning(
        'search model dir %s is a retarget to %d targets (%s): it is '
        'evaluated at its first, %g; to evaluate another, retarget to it in '
        'a model dir of its own (docs/retarget.md)', model_dir, len(targets),
        ', '.join(f'{t:g}' for t in targets), targets[0])
  return Search(model_dir, config, spec, result, step_plan)


def check_agree(searches: Sequence[Search]) -> None:
  """Refuses searches of different spaces, data, cost models or targets."""
  first = searches[0]
  spec = serialization.dumps(first.spec)
  for other in searches[1:]:
    for name in SHARED_FIELDS:
      a, b = getattr(first.config, name), getattr(other.config, name)
      if a != b:
        raise EvaluationError(
            f'searches disagree on {name}: {a!r} in {first.model_dir}, '
            f'{b!r} in {other.model_dir}; evaluate searches of one space, '
            'dataset, cost model and target together')
    if serialization.dumps(other.spec) != spec:
      raise EvaluationError(
          f'{first.model_dir} and {other.model_dir} searched different '
          'model specs')


def _cost_model(config: SearchConfig):
  if config.cost_model == cost_models.NONE:
    return None, None
  return cost_models.get(config.cost_model), cost_models.context_for(config)


def _bounds(config: EvaluationConfig) -> Optional[Tuple[float, float]]:
  """The target's window if the config gives it, else None."""
  if config.min_cost is None:
    return None
  return config.min_cost, config.max_cost


def _rules(final_architecture: str) -> List[str]:
  if final_architecture == BOTH:
    return [selection.ARGMAX, selection.IN_WINDOW]
  return [final_architecture]


def _searched(config: EvaluationConfig, index: int, search: Search
              ) -> Tuple[Dict[str, Any], List[Candidate]]:
  """One search's summary for the plan and its searched candidates."""
  distribution = selection.for_search(
      search.config, search.spec, search.result,
      relative_window=config.relative_window, bounds=_bounds(config),
      num_samples=config.selection_samples, seed=config.seed)
  try:
    choices = {r: distribution.choose(r)
               for r in _rules(config.final_architecture)}
  except selection.SelectionError as e:
    raise EvaluationError(f'{search.model_dir}: {e}') from None
  by_architecture: Dict[str, List[str]] = {}
  for rule, choice in choices.items():
    by_architecture.setdefault(choice.architecture, []).append(rule)
  found = []
  for arch, rules in by_architecture.items():
    choice = choices[rules[0]]
    found.append(candidates_lib.searched_candidate(
        search.spec, index, rules, choice.indices, choice.cost))
  summary = {'model_dir': search.model_dir, 'step': search.result.step,
             'choices': {r: c.to_dict() for r, c in choices.items()},
             'candidates': [c.id for c in found]}
  return summary, found


def _randoms(config: EvaluationConfig, first: Search,
             searched: Sequence[Candidate], model, context,
             target: Optional[float]
             ) -> Tuple[Optional[Tuple[float, float]], List[Candidate]]:
  """The target's window and the random candidates (in it, and at the
  cost of each search that missed it)."""
  if target is None:
    if config.num_random:
      raise EvaluationError('the searches have no cost model and target, '
                            'so there is no cost window for random '
                            'architectures; use --num_random=0')
    return None, []
  window = _bounds(config) or candidates_lib.window_around(
      target, config.relative_window)
  try:
    randoms = candidates_lib.random_candidates(
        first.spec, model, context, window, config.num_random, config.seed,
        config.max_attempts)
    randoms += candidates_lib.own_cost_candidates(
        first.spec, model, context, searched, window, config.relative_window,
        config.num_random_own_cost, config.seed, config.max_attempts)
  except candidates_lib.CandidateError as e:
    raise EvaluationError(str(e)) from None
  return window, randoms


def make(config: EvaluationConfig, searches: Sequence[Search]) -> Plan:
  """Chooses every candidate (nothing is written).

  Args:
    config: the evaluation's config.
    searches: the finished searches, agreeing (`check_agree`).

  Raises:
    EvaluationError: if a window is empty or unreachable, a rule cannot be
      applied or an extra or reference architecture is not one of the
      searched space.
  """
  first = searches[0]
  model, context = _cost_model(first.config)
  try:
    extra = candidates_lib.parse_architectures(config.extra_architectures,
                                               first.spec)
    references = candidates_lib.reference_candidates(
        first.spec, first.config.search_space, config.reference_nets, model,
        context)
  except candidates_lib.CandidateError as e:
    raise EvaluationError(str(e)) from None
  target = first.config.rl_cost_model_target if model else None
  summaries, searched = [], []
  for index, search in enumerate(searches):
    logging.info('evaluation: choosing the architecture of search %d (%s)',
                 index, search.model_dir)
    summary, found = _searched(config, index, search)
    summaries.append(summary)
    searched += found
  window, randoms = _randoms(config, first, searched, model, context, target)
  return Plan(
      search_space=first.config.search_space,
      cost_model=first.config.cost_model, unit=model.unit if model else '',
      target=target, window=window, searches=summaries,
      candidates=searched + randoms + references
      + candidates_lib.extra_candidates(first.spec, extra, model, context))


def read(output_dir: str) -> Optional[Plan]:
  """The plan an output dir holds, None if it has none."""
  path = os.path.join(output_dir, PLAN_FILENAME)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return Plan.from_json(f.read())
