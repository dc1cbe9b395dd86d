"""The one typed, validated configuration of a search job.

`bin/search.py` turns flags into a `SearchConfig`; the library never reads
flags. The config is written to the model directory as `config.json` at start
and checked for compatibility when a run resumes. Defaults are the TuNAS
paper's (SPEC.md sections 5-6) unless a comment says otherwise.
"""

import dataclasses
import json
import math
import os
from typing import Any, Dict, Optional

CONFIG_FILENAME = 'config.json'
MODEL_SPEC_FILENAME = 'model_spec.json'
# TuNAS searches at 224x224; the smallest size every space can take is the
# smallest input that still leaves a 1x1 feature map after five stride-2 steps.
MIN_IMAGE_SIZE = 28
MAX_IMAGE_SIZE = 224

# Fields that may differ between the run that wrote a model dir and a run
# that resumes it: where things are and how often to log/save, nothing that
# changes the graph, the schedules or the meaning of a checkpoint.
RUNTIME_FIELDS = frozenset({
    'model_dir', 'data_dir', 'tpu', 'tpu_zone', 'gcp_project',
    'tpu_iterations_per_loop', 'save_checkpoints_steps',
    'keep_checkpoint_max', 'log_every_steps'})


class ConfigError(ValueError):
  """A configuration value is invalid or incompatible with the model dir."""


class JobConfigMixin:
  """Derived values and persistence shared by the search and train/eval configs.

  Subclasses are frozen dataclasses with the training fields used below.
  """

  @property
  def total_steps(self) -> int:
    """Number of steps: `max_steps`, else `epochs` over the training split."""
    if self.max_steps is not None:
      return self.max_steps
    return max(1, int(math.ceil(
        self.epochs * self.num_train_examples / self.train_batch_size)))

  @property
  def weight_decay(self) -> float:
    if self.model_weight_decay is not None:
      return self.model_weight_decay
    return 3e-5 if self.use_bfloat16 else 4e-5  # SPEC.md section 2.

  @property
  def scaled_model_learning_rate(self) -> float:
    """Learning rate x batch/256 (SPEC.md section 6; Goyal et al. 2017)."""
    return self.model_learning_rate * self.train_batch_size / 256

  @property
  def iterations_per_checkpoint(self) -> int:
    """Checkpoint interval: by default every 5 host loops (and at the end)."""
    if self.save_checkpoints_steps is not None:
      return self.save_checkpoints_steps
    return 5 * self.tpu_iterations_per_loop

  def fraction_steps(self, fraction: float) -> int:
    return int(round(fraction * self.total_steps))

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json_values(cls, values: Dict[str, Any]):
    """Builds the config from parsed JSON, refusing unknown fields."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ConfigError(f'unknown config field(s) {unknown}')
    return cls(**values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingFields(JobConfigMixin):
  """Fields every training job has (search and stand-alone train/eval).

  Keyword-only, so job configs can add required fields of their own.
  Learning rates are per 256 training images (SPEC.md section 6).
  """
  dataset: str = 'embedded'
  data_dir: Optional[str] = None
  image_size: int = 224
  input_channels: int = 3
  # Training recipe (SPEC.md sections 2 and 6).
  train_batch_size: int = 4096
  epochs: float = 90.0
  max_steps: Optional[int] = None
  model_learning_rate: float = 0.165
  model_warmup_steps_fraction: float = 0.025
  model_momentum: float = 0.9
  model_rmsprop_decay: float = 0.9
  model_rmsprop_epsilon: float = 1.0
  # None picks SPEC.md's default: 4e-5, or 3e-5 when training in bfloat16.
  model_weight_decay: Optional[float] = None
  label_smoothing: float = 0.1
  # Execution.
  use_bfloat16: bool = False
  use_tpu: bool = False
  tpu: Optional[str] = None
  tpu_zone: Optional[str] = None
  gcp_project: Optional[str] = None
  num_replicas: int = 1
  tpu_iterations_per_loop: int = 100
  save_checkpoints_steps: Optional[int] = None
  keep_checkpoint_max: int = 5
  log_every_steps: Optional[int] = None
  seed: Optional[int] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchConfig(TrainingFields):
  """Everything a search needs besides the model spec.

  Learning rates are given per 256 training images and scaled by
  `train_batch_size / 256` (SPEC.md sections 5-6).
  """
  search_space: str
  model_dir: str
  num_classes: int
  num_train_examples: int
  # Controller (SPEC.md section 5).
  rl_learning_rate: float = 3e-4
  use_exponential_rl_learning_rate_schedule: bool = True
  rl_entropy_regularization: float = 0.0
  rl_baseline_momentum: float = 0.95
  rl_batch_size_multiplier: float = 4.0
  rl_delay_steps_fraction: float = 0.25
  rl_temperature: float = 1.0
  increase_ops_warmup_steps_fraction: float = 0.25
  increase_filters_warmup_steps_fraction: float = 0.25
  rl_reward_function: str = 'abs'
  cost_model: str = 'pixel1_latency'
  cost_model_space: Optional[str] = None
  rl_cost_model_target: Optional[float] = None
  rl_cost_model_exponent: float = -0.10
  # Test hook: when set, the reward uses this instead of validation accuracy.
  constant_validation_accuracy: Optional[float] = None
  # Execution (see TrainingFields for the rest).
  use_gradient_sync_barrier: bool = True

  def __post_init__(self):
    _validate(self)

  # Derived values -----------------------------------------------------------

  @property
  def validation_batch_size(self) -> int:
    """Per-step controller batch: `rl_batch_size_multiplier` x training."""
    return int(round(self.train_batch_size * self.rl_batch_size_multiplier))

  @property
  def scaled_rl_learning_rate(self) -> float:
    """Controller learning rate x batch/256 (SPEC.md section 5)."""
    return self.rl_learning_rate * self.train_batch_size / 256

  # Persistence --------------------------------------------------------------

  @classmethod
  def from_json(cls, text: str) -> 'SearchConfig':
    return cls.from_json_values(json.loads(text))

  def incompatibilities(self, other: 'SearchConfig') -> Dict[str, Any]:
    """Fields (outside RUNTIME_FIELDS) whose values differ: name -> (old, new)."""
    mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
    return {k: (theirs[k], mine[k]) for k in mine
            if k not in RUNTIME_FIELDS and mine[k] != theirs[k]}


def check(condition: bool, message: str) -> None:
  """Raises ConfigError(message) unless `condition`."""
  if not condition:
    raise ConfigError(message)



def validate_training(c: Any) -> None:
  """Checks the fields every training job has (search and train/eval).

  Raises:
    ConfigError: naming the first invalid value.
  """
  check(c.num_replicas > 0, f'num_replicas must be positive, got '
        f'{c.num_replicas}')
  check(c.train_batch_size > 0,
        f'train_batch_size must be positive, got {c.train_batch_size}')
  check(c.train_batch_size % c.num_replicas == 0,
        f'train_batch_size {c.train_batch_size} is not divisible by the '
        f'{c.num_replicas} replicas; use a multiple of {c.num_replicas}')
  check(c.use_tpu or c.num_replicas == 1,
        f'num_replicas={c.num_replicas} needs use_tpu; CPU/GPU runs use one '
        'replica')
  check(MIN_IMAGE_SIZE <= c.image_size <= MAX_IMAGE_SIZE,
        f'image_size {c.image_size} is outside the valid range '
        f'{MIN_IMAGE_SIZE}..{MAX_IMAGE_SIZE}')
  check(c.num_classes > 1, f'num_classes must be > 1, got {c.num_classes}')
  check(c.max_steps is None or c.max_steps > 0,
        f'max_steps must be positive, got {c.max_steps}')
  check(c.max_steps is not None or (c.epochs > 0 and
                                    c.num_train_examples > 0),
        'epochs and the training split size must be positive (or give '
        f'max_steps); got epochs={c.epochs}, '
        f'num_train_examples={c.num_train_examples}')
  check(0.0 <= c.model_warmup_steps_fraction <= 1.0,
        'model_warmup_steps_fraction must be in [0, 1], got '
        f'{c.model_warmup_steps_fraction}')
  check(c.model_learning_rate > 0, 'model_learning_rate must be positive, '
        f'got {c.model_learning_rate}')
  check(0.0 <= c.label_smoothing < 1.0, 'label_smoothing must be in [0, 1), '
        f'got {c.label_smoothing}')
  check(c.model_weight_decay is None or c.model_weight_decay >= 0,
        f'model_weight_decay must be >= 0, got {c.model_weight_decay}')
  check(c.tpu_iterations_per_loop > 0, 'tpu_iterations_per_loop must be '
        f'positive, got {c.tpu_iterations_per_loop}')


def _validate(c: SearchConfig) -> None:
  """Raises ConfigError naming the first invalid value."""
  validate_training(c)
  check(c.validation_batch_size % c.num_replicas == 0,
        f'validation batch {c.validation_batch_size} (train_batch_size x '
        f'rl_batch_size_multiplier) is not divisible by the {c.num_replicas} '
        'replicas')
  for name in ('rl_delay_steps_fraction',
               'increase_ops_warmup_steps_fraction',
               'increase_filters_warmup_steps_fraction'):
    value = getattr(c, name)
    check(0.0 <= value <= 1.0, f'{name} must be in [0, 1], got {value}')
  check(0.0 <= c.rl_baseline_momentum < 1.0,
        f'rl_baseline_momentum must be in [0, 1), got '
        f'{c.rl_baseline_momentum}')
  check(c.rl_batch_size_multiplier >= 1 and
        float(c.rl_batch_size_multiplier).is_integer(),
        'rl_batch_size_multiplier must be a whole number >= 1, got '
        f'{c.rl_batch_size_multiplier}')
  check(c.rl_temperature > 0, f'rl_temperature must be positive, got '
        f'{c.rl_temperature}')
  check(c.cost_model == 'none' or c.rl_cost_model_target is not None,
        f'cost model {c.cost_model!r} needs rl_cost_model_target')
  check(c.rl_cost_model_target is None or c.rl_cost_model_target > 0,
        f'rl_cost_model_target must be positive, got '
        f'{c.rl_cost_model_target}')
  check(c.constant_validation_accuracy is None or
        0.0 <= c.constant_validation_accuracy <= 1.0,
        'constant_validation_accuracy must be in [0, 1]')


def write_or_check(config: SearchConfig, model_spec_json: str) -> bool:
  """Writes config.json and model_spec.json, or checks them on resume.

  Args:
    config: this run's config: a SearchConfig, or any config class with the
      same `search_space`, `model_dir`, `to_json`, `from_json` and
      `incompatibilities` (train_eval's TrainEvalConfig).
    model_spec_json: the serialised model spec of this run.

  Returns:
    True if the model dir already held a compatible run (a resume).

  Raises:
    ConfigError: if the model dir was written by a different search space,
      model spec or an incompatible config; nothing is written then.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config_path = os.path.join(config.model_dir, CONFIG_FILENAME)
  spec_path = os.path.join(config.model_dir, MODEL_SPEC_FILENAME)
  gfile = tf.io.gfile
  if gfile.exists(config_path):
    with gfile.GFile(config_path) as f:
      old = type(config).from_json(f.read())
    if old.search_space != config.search_space:
      raise ConfigError(
          f'model dir {config.model_dir} holds a search of '
          f'{old.search_space!r}, not {config.search_space!r}; use another '
          '--model_dir')
    diffs = config.incompatibilities(old)
    if diffs:
      listed = ', '.join(f'{k} (was {a!r}, now {b!r})'
                         for k, (a, b) in sorted(diffs.items()))
      raise ConfigError(f'model dir {config.model_dir} was written by an '
                        f'incompatible config: {listed}')
    if gfile.exists(spec_path):
      with gfile.GFile(spec_path) as f:
        if f.read() != model_spec_json:
          raise ConfigError(f'model dir {config.model_dir} holds a different '
                            'model spec (the search space definition changed)')
    return True
  gfile.makedirs(config.model_dir)
  for path, text in ((spec_path, model_spec_json),
                     (config_path, config.to_json())):
    with gfile.GFile(path + '.tmp', 'w') as f:
      f.write(text)
    gfile.rename(path + '.tmp', path, overwrite=True)
  return False
