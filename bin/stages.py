"""The fine stage of MobileNetV4's two-stage search, from a coarse search.

`bin/search.py --coarse_model_dir=DIR` searches the fine space of the
finished coarse search in DIR (docs/mobilenet_v4.md): the space named after
the widths and depths of the coarse search's final architecture, by the
rule the coarse search reported it with (`selection.AUTO`, as
search_result.json and analyze_search name it) unless
`--coarse_architecture` names another rule or an architecture, so that
config.json names it and a resume, analyze_search, train_eval and export
find it like any search. What the coarse search optimised for (its dataset,
input and cost settings) is the fine stage's default; a cost target that no
architecture of the fine space reaches is refused before anything is
written (`check_target`).
"""

import dataclasses
from typing import Any, Dict, Optional

from absl import flags

from search_spaces import mobilenet_v4
from . import cli
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.results import selection
from tunas_search.config import SearchConfig
from tunas_search.cost_models import ranges

# SearchConfig fields the fine stage takes from the coarse search unless
# their flags are given: what the search optimises for.
INHERITED = ('dataset', 'data_dir', 'image_size', 'cost_model',
             'cost_model_file', 'rl_cost_model_target',
             'rl_cost_model_exponent', 'rl_reward_function')
# `--coarse_architecture` that is an architecture string, not a rule.
GIVEN = 'given'


@dataclasses.dataclass(frozen=True)
class CoarseResult:
  """A finished coarse search, the architecture refined and its fine space.

  Attributes:
    model_dir: the coarse search's model dir.
    config: the coarse search's config.
    fine_space: the name of the fine space at the architecture's widths and
      depths.
    architecture: the coarse architecture refined, as a string.
    label: how it was chosen: a rule and what it resolved to (`auto ->
      in_window`, `selection.Choice.label`), or `given`.
    cost: its cost under the coarse search's cost model, None without one.
    unit: that cost model's unit ('' without one).
  """
  model_dir: str
  config: SearchConfig
  fine_space: str
  architecture: str
  label: str
  cost: Optional[float]
  unit: str

  def describe(self) -> str:
    """One line: which coarse architecture the fine stage refines."""
    cost = ('' if self.cost is None
            else f', cost {self.cost:.4g} {self.unit}')
    return (f'Fine stage of the coarse search in {self.model_dir}: its '
            f'architecture ({self.label}) {self.architecture}{cost}; fine '
            f'space {self.fine_space}')


def read(model_dir: str, which: str = selection.AUTO) -> CoarseResult:
  """The fine space of the finished coarse search in `model_dir`.

  Args:
    model_dir: the coarse search's model dir.
    which: a final-architecture rule (`selection.RULES`; `auto` is the one
      the coarse search reports), or an architecture string of its space.

  Raises:
    cli.UsageError: naming `--coarse_model_dir` if the dir holds no search,
      an unfinished one, or a search of another space, and naming
      `--coarse_architecture` for a rule that does not apply or an
      architecture string that does not fit.
  """
  # pylint: disable=g-import-not-at-top
  from tunas_search.results import analysis  # Imports TensorFlow.
  # pylint: enable=g-import-not-at-top
  try:
    config, spec = analysis.load_search(model_dir)
    result = analysis.analyze(model_dir)
  except analysis.AnalysisError as e:
    raise cli.UsageError(f'--coarse_model_dir: {e}') from None
  coarse_spaces = ', '.join(f'{l.name}_coarse' for l in mobilenet_v4.LAYOUTS)
  if mobilenet_v4.layout_of_coarse(spec) is None:
    raise cli.UsageError(
        f'--coarse_model_dir: {model_dir} holds a search of '
        f'{config.search_space}, not of a MobileNetV4 coarse space '
        f'({coarse_spaces})')
  if result.step < config.total_steps:
    raise cli.UsageError(
        f'--coarse_model_dir: the coarse search in {model_dir} is at step '
        f'{result.step} of {config.total_steps}; finish it first (rerun its '
        'command)')
  indices, label, cost = _coarse_architecture(config, spec, result, which)
  layout, stages = mobilenet_v4.coarse_result(spec, indices)
  unit = ('' if config.cost_model == cost_models.NONE
          else cost_models.get(config.cost_model).unit)
  return CoarseResult(model_dir, config, mobilenet_v4.fine_name(layout, stages),
                      architecture.format_indices(indices), label, cost, unit)


def _coarse_architecture(config: SearchConfig, spec: Any, result: Any,
                         which: str):
  """(indices, label, cost) of the coarse architecture `which` names."""
  if which in selection.RULES:
    try:
      choice = selection.for_search(config, spec, result).choose(which)
    except selection.SelectionError as e:
      raise cli.UsageError(f'--coarse_architecture={which}: {e}') from None
    return choice.indices, choice.label, choice.cost
  try:
    indices = architecture.canonicalize(
        spec, architecture.parse_indices(which, spec))
  except architecture.ArchitectureError as e:
    raise cli.UsageError(
        f'--coarse_architecture={which}: {e}; valid: '
        f'{", ".join(selection.RULES)} or an architecture string of '
        f'{config.search_space}') from None
  cost = None
  if config.cost_model != cost_models.NONE:
    cost = cost_models.get(config.cost_model).cost(
        spec, indices, cost_models.context_for(config))
  return indices, GIVEN, cost


def check_target(config: SearchConfig, spec: Any,
                 allow_unreachable: bool) -> Optional[ranges.CostRange]:
  """The fine space's cost range; refuses a target outside it.

  Args:
    config: the fine stage's config (its cost model and target).
    spec: the fine space.
    allow_unreachable: search even when the target is out of reach.

  Returns:
    The range, None without a cost model.

  Raises:
    cli.UsageError: one line with the reachable range, when the range is
      exact, the target lies outside it and `allow_unreachable` is False.
  """
  if config.cost_model == cost_models.NONE:
    return None
  model = cost_models.get(config.cost_model)
  span = ranges.cost_range(spec, model, cost_models.context_for(config))
  target = config.rl_cost_model_target
  if span.exact and not span.contains(target) and not allow_unreachable:
    raise cli.UsageError(
        f'--rl_cost_model_target={target:g} is out of reach of '
        f'{config.search_space}: under --cost_model={config.cost_model} its '
        f'architectures cost {span.low:.4g} to {span.high:.4g} {model.unit}; '
        'give a target in that range, another --coarse_architecture, or '
        '--allow_unreachable_target to search anyway')
  return span


def describe_range(config: SearchConfig,
                   span: Optional[ranges.CostRange]) -> Optional[str]:
  """One line: the fine space's cost range and where the target lies."""
  if span is None:
    return None
  unit = cost_models.get(config.cost_model).unit
  target = config.rl_cost_model_target
  if span.contains(target):
    where = 'inside it'
  elif span.exact:
    where = 'OUTSIDE it: no architecture reaches it'
  else:
    where = 'outside it'
  how = 'exact' if span.exact else 'estimated: the true range may be wider'
  return (f'{config.search_space} costs {span.low:.4g} to {span.high:.4g} '
          f'{unit} ({how}); the target {target:.4g} {unit} lies {where}')


def inherited(f: flags.FlagValues, coarse: CoarseResult) -> Dict[str, Any]:
  """The coarse search's values of the `INHERITED` fields not given."""
  return {name: getattr(coarse.config, name) for name in INHERITED
          if not f[name].present}


def check_search_space(f: flags.FlagValues, coarse: CoarseResult) -> None:
  """Refuses a --search_space other than the coarse result's fine space."""
  if f['search_space'].present and f.search_space != coarse.fine_space:
    raise cli.UsageError(
        f'--search_space={f.search_space} does not match --coarse_model_dir, '
        f'whose fine space is {coarse.fine_space}; give only one of them')
