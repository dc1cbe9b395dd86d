"""`bin/search.py --retarget_from=SEARCH_DIR`: flags -> a retarget's config.

A retarget (docs/retarget.md) trains fresh controllers on a finished
search's fixed shared weights. Its config is the source search's, with the
cost target(s) and the few controller and runtime flags given on the
command line; a flag that would change what the weights were trained on
(dataset, batch, space, recipe) is refused in one line.
"""

from typing import Any, Dict, List, Optional, Tuple

from absl import flags

from . import cli
from tunas_search import config as config_lib
from tunas_search import cost_models

# Flags a retarget may set: its targets, cost model and reward, its
# controller's settings and how long it runs; the runtime fields too.
RETARGET_FLAGS = frozenset({
    'cost_model', 'cost_model_file', 'rl_reward_function',
    'rl_cost_model_exponent', 'max_steps', 'rl_learning_rate',
    'use_exponential_rl_learning_rate_schedule', 'rl_entropy_regularization',
    'rl_baseline_momentum', 'rl_temperature', 'rl_delay_steps_fraction',
    'increase_ops_warmup_steps_fraction',
    'increase_filters_warmup_steps_fraction', 'seed',
    'constant_validation_accuracy',
    # The validation batch (docs/retarget.md, "Cost"): one training batch
    # by default, for cheap steps; the source's 4 for its reward noise.
    'rl_batch_size_multiplier'}) | (
        config_lib.RUNTIME_FIELDS - {'model_dir'})
# Hand-defined flags of bin/search.py that a retarget refuses: the source
# search fixes them.
_FIXED_FLAGS = ('search_space', 'dataset', 'image_size', 'use_bfloat16',
                'num_replicas', 'coarse_model_dir', 'coarse_architecture',
                'allow_unreachable_target')


def parse_targets(f: flags.FlagValues) -> List[float]:
  """The retarget's cost targets, first the one of search_result.json.

  Raises:
    cli.UsageError: without a target, with both target flags, or for a
      target that is not a positive number.
  """
  if f.rl_cost_model_targets and f.rl_cost_model_target is not None:
    raise cli.UsageError('give --rl_cost_model_target or '
                         '--rl_cost_model_targets, not both')
  if f.rl_cost_model_targets:
    texts = f.rl_cost_model_targets
  elif f.rl_cost_model_target is not None:
    texts = [str(f.rl_cost_model_target)]
  else:
    raise cli.UsageError('--retarget_from needs --rl_cost_model_target=T or '
                         '--rl_cost_model_targets=T1,T2,...')
  targets = []
  for text in texts:
    try:
      value = float(text)
    except ValueError:
      value = float('nan')
    if not value > 0 or value == float('inf'):
      raise cli.UsageError(f'--rl_cost_model_targets: bad target {text!r}; '
                           'targets are positive numbers, e.g. 60,84,110')
    targets.append(value)
  if len(set(targets)) != len(targets):
    raise cli.UsageError(f'--rl_cost_model_targets: a target is repeated in '
                         f'{",".join(texts)}')
  return targets


def check_no_retarget_flags(f: flags.FlagValues) -> None:
  """Refuses --rl_cost_model_targets without --retarget_from."""
  if f.rl_cost_model_targets and not f.retarget_from:
    raise cli.UsageError('--rl_cost_model_targets needs --retarget_from '
                         '(a search has one target: --rl_cost_model_target)')


def build(f: flags.FlagValues, config_names: Tuple[str, ...]
          ) -> Tuple[Any, Any, List[float]]:
  """Checks the source and the flags; returns (config, source, targets).

  Args:
    f: the parsed flags.
    config_names: the names of the generated config flags.

  Raises:
    cli.UsageError: one line for a bad or unfinished source dir, a flag a
      retarget cannot change, or a bad target or cost model.
  """
  # pylint: disable=g-import-not-at-top
  from tunas_search.search import retarget
  # pylint: enable=g-import-not-at-top
  for name in _FIXED_FLAGS + tuple(n for n in config_names
                                   if n not in RETARGET_FLAGS):
    if f[name].present:
      raise cli.UsageError(
          f'--{name} cannot change in a retarget: it is the source search\'s;'
          f' a retarget may set {", ".join(sorted(RETARGET_FLAGS))}')
  if f['resume_from'].present:
    raise cli.UsageError('--resume_from is for a search; a retarget resumes '
                         'from its latest checkpoint when rerun')
  if not f.model_dir:
    raise cli.UsageError('--model_dir is required')
  targets = parse_targets(f)
  cli.check_output_dir('model_dir', f.model_dir)
  try:
    source = retarget.read_source(f.retarget_from)
    overrides: Dict[str, Optional[Any]] = {
        name: f[name].value for name in config_names
        if name in RETARGET_FLAGS and f[name].present}
    config = retarget.make_config(source, f.model_dir, targets, **overrides)
    model = cost_models.get(config.cost_model)
    if not model.applies(config.effective_cost_model_space, source.spec):
      raise config_lib.ConfigError(
          f'--cost_model={config.cost_model} cannot score the space of '
          f'{f.retarget_from} ({config.search_space}); valid choices: '
          + ', '.join(cost_models.applicable(
              config.effective_cost_model_space, source.spec,
              config.cost_model_file)))
    cost_models.check_file(config.cost_model, cost_models.context_for(config))
  except (config_lib.ConfigError, cost_models.LatencyModelError,
          KeyError) as e:
    raise cli.UsageError(str(e).strip('"\'')) from None
  return config, source, targets


def run(f: flags.FlagValues, config_names: Tuple[str, ...]) -> None:
  """Runs (or resumes) the retarget, writes its front, prints both."""
  config, source, targets = build(f, config_names)
  # pylint: disable=g-import-not-at-top
  from tunas_search import data
  from tunas_search.results import front as front_lib
  from tunas_search.runtime import model_dir as model_dir_lib
  from tunas_search.search import retarget
  from tunas_search.search import runner
  # pylint: enable=g-import-not-at-top
  try:
    data.check_available(config.dataset, config.data_dir)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  try:
    result = retarget.run_retarget(config, source, targets)
  except config_lib.ConfigError as e:
    raise cli.UsageError(str(e)) from None
  except (runner.NonFiniteLossError, model_dir_lib.DiskFullError) as e:
    cli.fail(str(e), exit_code=cli.FAILURE_EXIT_CODE)
  print(runner.format_result(result))
  front = front_lib.build(config.model_dir, config, source, targets,
                          seed=config.seed or 0)
  paths = front_lib.write(front, config.model_dir)
  print(front_lib.format_text(front))
  print('Front written to ' + ', '.join(paths))
