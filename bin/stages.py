"""The fine stage of MobileNetV4's two-stage search, from a coarse search.

`bin/search.py --coarse_model_dir=DIR` searches the fine space of the
finished coarse search in DIR (docs/mobilenet_v4.md): the space named after
its final widths and depths (`search_spaces.mobilenet_v4.fine_name`), so
config.json names it and a resume, analyze_search, train_eval and export
find it like any search. What the coarse search optimised for (its dataset,
input and cost settings) is the fine stage's default.
"""

import dataclasses
from typing import Any, Dict

from absl import flags

from search_spaces import mobilenet_v4
from . import cli
from tunas_search.config import SearchConfig

# SearchConfig fields the fine stage takes from the coarse search unless
# their flags are given: what the search optimises for.
INHERITED = ('dataset', 'data_dir', 'image_size', 'cost_model',
             'cost_model_file', 'rl_cost_model_target',
             'rl_cost_model_exponent', 'rl_reward_function')


@dataclasses.dataclass(frozen=True)
class CoarseResult:
  """A finished coarse search and the fine space of its result.

  Attributes:
    config: the coarse search's config.
    fine_space: the name of the fine space at its final widths and depths.
    architecture: its final architecture string.
  """
  config: SearchConfig
  fine_space: str
  architecture: str


def read(model_dir: str) -> CoarseResult:
  """The fine space of the finished coarse search in `model_dir`.

  Raises:
    cli.UsageError: naming `--coarse_model_dir` if the dir holds no search,
      an unfinished one, or a search of another space.
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
  layout, stages = mobilenet_v4.coarse_result(spec, result.indices)
  return CoarseResult(config, mobilenet_v4.fine_name(layout, stages),
                      result.architecture)


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
