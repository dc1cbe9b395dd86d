"""The one typed, validated configuration of a search evaluation.

`bin/evaluate_search.py` turns flags into an `EvaluationConfig`; it is written
to the output dir as `config.json` with the plan of candidates, and a rerun
(or another shard) must agree with it on everything outside RUNTIME_FIELDS.
Defaults are the TuNAS protocol (docs/method.md section 7): random
architectures in +-1.2% of the target, 90 epochs of stand-alone training with
the search's recipe, evaluated on the held-out validation split.
"""

import dataclasses
import json
from typing import Any, Dict, Optional, Tuple

from tunas_search import config as config_lib
from tunas_search.config import ConfigError
from tunas_search.config import option
from tunas_search.config import validation
from tunas_search.config.fields import same_option
from tunas_search.config.fields import TrainingFields
from tunas_search.config.standalone import TrainEvalConfig

CONFIG_FILENAME = 'config.json'
# The rules of results/selection.py, and `both`: the argmax and the in-window choice
# of every search, each a candidate (one if they coincide).
BOTH = 'both'
FINAL_ARCHITECTURES = validation.SELECTION_RULES + (BOTH,)
# May differ between runs on one output dir: where things are, how the work
# is split and run, and what only the report reads.
RUNTIME_FIELDS = frozenset({
    'output_dir', 'search_model_dirs', 'data_dir', 'use_tpu', 'tpu',
    'tpu_zone', 'gcp_project', 'num_replicas', 'tpu_iterations_per_loop',
    'shard_index', 'num_shards', 'report_only', 'bootstrap_resamples',
    'decisive_difference'})


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
  """Everything a search evaluation needs.

  Fields without a flag of their own: `search_model_dirs` (repeatable flag),
  `extra_architectures` (read from a file), `reference_nets` ((name, space,
  architecture) of each `--reference_nets` name, read from the registry in
  bin/), `shard_index` and `num_shards` (`--shard=i/n`).
  """
  output_dir: str = option('', 'Directory of the evaluation: its plan, one '
                           'train_eval model dir per training, the report.')
  search_model_dirs: Tuple[str, ...] = ()
  extra_architectures: Tuple[str, ...] = ()
  reference_nets: Tuple[Tuple[str, str, str], ...] = ()
  # Candidates.
  final_architecture: str = option(
      validation.AUTO, "Which architecture of each search to evaluate: "
      "argmax (TuNAS), in_window (the controller's most probable sampled "
      'architecture in the cost window), auto (argmax when it lies in the '
      'window, else in_window) or both (argmax and in_window).',
      choices=FINAL_ARCHITECTURES)
  num_random: int = option(12, 'Uniformly random architectures in the cost '
                           'window around the target.')
  num_random_own_cost: int = option(
      4, "Random architectures in a window around a searched architecture's "
      'own cost, for each search whose architecture misses the target window.')
  relative_window: float = option(
      validation.RELATIVE_WINDOW, 'Half-width of every cost window, relative '
      '(0.012: 83-85 ms around 84 ms, as TuNAS).')
  min_cost: Optional[float] = option(
      None, "Lower end of the target's cost window, instead of the relative "
      'window around the target (with --max_cost).')
  max_cost: Optional[float] = option(
      None, "Upper end of the target's cost window (with --min_cost).")
  seed: int = option(0, 'Seed of the random candidates and of the '
                     'trainings.')
  max_attempts: int = option(validation.MAX_RANDOM_ATTEMPTS,
                             'Give up on a cost window after this many '
                             'random draws.')
  selection_samples: int = option(
      validation.SELECTION_SAMPLES, 'Architectures sampled from each controller to '
      'measure how settled it is (and for in_window).')
  # One-shot scoring.
  one_shot_batch_size: Optional[int] = option(
      None, "Images per one-shot batch (default: the search's validation "
      'batch per replica, whose statistics BN used).')
  one_shot_batches: Optional[int] = option(
      None, 'Batches of the validation split per one-shot score (default: '
      'every full batch).')
  # Stand-alone training: one recipe for every candidate.
  seeds: int = option(2, 'Stand-alone trainings per candidate, each with its '
                      'own seed.')
  # Its defaults are stand-alone training's (TrainingFields, TrainEvalConfig).
  train_batch_size: Optional[int] = option(
      None, "Stand-alone training batch size (default: the searches' own, "
      "not TuNAS's ImageNet 4096).")
  train_steps: Optional[int] = option(None, 'Stand-alone training steps; '
                                      'overrides --epochs.')
  epochs: float = same_option(TrainingFields, 'epochs', 'Stand-alone training '
                              "epochs over the search's training split.")
  model_learning_rate: float = same_option(
      TrainingFields, 'model_learning_rate', 'Stand-alone RMSProp learning '
      'rate per 256 images.')
  eval_batch_size: int = same_option(TrainEvalConfig, 'eval_batch_size',
                                     'Evaluation batch size.')
  use_bfloat16: bool = same_option(TrainingFields, 'use_bfloat16',
                                   'Train stand-alone in bfloat16.')
  # Report.
  bootstrap_resamples: int = option(2000, 'Bootstrap resamples of every rank '
                                    'correlation interval.')
  decisive_difference: float = option(
      1.0, 'Points of top-1: a comparison that is not significant is '
      'decisive ("no difference larger than X") only when it detects this '
      'difference at 80% power; else the verdict is "undecided" with the '
      'searches x seeds that would decide.')
  # Execution, as every training job's (TrainingFields).
  data_dir: Optional[str] = same_option(
      TrainingFields, 'data_dir', "The dataset's data directory (default: the "
      "searches').")
  use_tpu: bool = same_option(TrainingFields, 'use_tpu',
                              'Train on Cloud TPU (needs --tpu).')
  tpu: Optional[str] = same_option(TrainingFields, 'tpu')
  tpu_zone: Optional[str] = same_option(TrainingFields, 'tpu_zone')
  gcp_project: Optional[str] = same_option(TrainingFields, 'gcp_project')
  num_replicas: int = same_option(TrainingFields, 'num_replicas',
                                  'TPU cores a training runs on.')
  tpu_iterations_per_loop: int = same_option(
      TrainingFields, 'tpu_iterations_per_loop', 'Steps per host loop.')
  shard_index: int = 0
  num_shards: int = 1
  report_only: bool = option(False, 'Only write the report of what is done '
                             '(any machine, any time).')

  def __post_init__(self):
    _validate(self)

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> 'EvaluationConfig':
    """Parses `to_json()`'s output.

    Raises:
      ConfigError: for text that is not such a config.
    """
    try:
      values = json.loads(text)
    except ValueError as e:
      raise ConfigError(f'not JSON: {e}') from None
    if not isinstance(values, dict):
      raise ConfigError('not a JSON object')
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ConfigError(f'not an evaluation config: unknown field(s) '
                        f'{unknown}')
    for name in ('search_model_dirs', 'extra_architectures'):
      values[name] = tuple(values.get(name, ()))
    values['reference_nets'] = tuple(tuple(r) for r in
                                     values.get('reference_nets', ()))
    return cls(**values)

  def incompatibilities(self, old: 'EvaluationConfig') -> Dict[str, Any]:
    """Fields outside RUNTIME_FIELDS that differ: name -> (old, new)."""
    mine, theirs = dataclasses.asdict(self), dataclasses.asdict(old)
    return {k: (theirs[k], mine[k]) for k in sorted(mine)
            if k not in RUNTIME_FIELDS and mine[k] != theirs[k]}


_check = config_lib.check


def _validate(c: EvaluationConfig) -> None:
  """Raises ConfigError naming the first invalid value."""
  _check(bool(c.output_dir), 'output_dir is required')
  _check(c.final_architecture in FINAL_ARCHITECTURES,
         f'unknown final_architecture {c.final_architecture!r}; valid '
         f'choices: {", ".join(FINAL_ARCHITECTURES)}')
  for name in ('num_random', 'num_random_own_cost'):
    _check(getattr(c, name) >= 0, f'{name} must be >= 0, got '
           f'{getattr(c, name)}')
  _check(0.0 < c.relative_window < 1.0,
         f'relative_window must be in (0, 1): a window of zero width is '
         f'empty; got {c.relative_window}')
  _check((c.min_cost is None) == (c.max_cost is None),
         'give both min_cost and max_cost, or neither')
  _check(c.min_cost is None or c.min_cost < c.max_cost,
         f'empty cost window: min_cost {c.min_cost} is not below max_cost '
         f'{c.max_cost}')
  config_lib.check_seed(c.seed)
  for name in ('max_attempts', 'selection_samples', 'seeds',
               'eval_batch_size', 'bootstrap_resamples',
               'num_replicas', 'tpu_iterations_per_loop'):
    _check(getattr(c, name) >= 1, f'{name} must be at least 1, got '
           f'{getattr(c, name)}')
  _check(c.decisive_difference > 0, 'decisive_difference must be positive '
         f'(points of top-1), got {c.decisive_difference}')
  for name in ('one_shot_batch_size', 'one_shot_batches', 'train_steps',
               'train_batch_size'):
    value = getattr(c, name)
    _check(value is None or value >= 1, f'{name} must be at least 1, got '
           f'{value}')
  _check(c.epochs > 0, f'epochs must be positive, got {c.epochs}')
  _check(c.model_learning_rate > 0, 'model_learning_rate must be positive, '
         f'got {c.model_learning_rate}')
  _check(c.num_shards >= 1 and 0 <= c.shard_index < c.num_shards,
         f'shard {c.shard_index}/{c.num_shards}: need 0 <= i < n')
  _check(c.report_only or bool(c.search_model_dirs),
         'give at least one search model dir (or report_only)')
  _check(len(set(c.search_model_dirs)) == len(c.search_model_dirs),
         'a search model dir is given twice')
  _check(c.use_tpu or c.num_replicas == 1,
         f'num_replicas={c.num_replicas} needs use_tpu')
  _check(not c.use_tpu or bool(c.tpu), 'use_tpu needs tpu (a name or a '
         'grpc:// address)')
