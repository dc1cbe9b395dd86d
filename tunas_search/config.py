"""The one typed, validated configuration of a search job.

`bin/search.py` turns flags into a `SearchConfig`; the library never reads
flags. Each field with a default is an `option` carrying its command-line
help, from which the CLIs derive their flags. The config is written to the
model directory as `config.json` at start and checked for compatibility when
a run resumes (only RUNTIME_FIELDS and a search's RESUMABLE_FIELDS may
change). Defaults are the TuNAS paper's (docs/method.md sections 5-6) unless
a comment says otherwise.
"""

import dataclasses
import json
import math
import os
from typing import Any, ClassVar, Dict, FrozenSet, Optional, Sequence, Tuple

from absl import logging

CONFIG_FILENAME = 'config.json'
MODEL_SPEC_FILENAME = 'model_spec.json'
# TuNAS searches at 224x224; the smallest size every space can take is the
# smallest input that still leaves a 1x1 feature map after five stride-2 steps.
# The largest takes MobileNetV4-Conv-L's 384x384 with room to spare
# (docs/mobilenet_v4.md).
MIN_IMAGE_SIZE = 28
MAX_IMAGE_SIZE = 512

# Fields that may differ between the run that wrote a model dir and a run
# that resumes it: where things are and how often to log/save, nothing that
# changes the graph, the schedules or the meaning of a checkpoint.
RUNTIME_FIELDS = frozenset({
    'model_dir', 'data_dir', 'tpu', 'tpu_zone', 'gcp_project',
    'cost_model_file', 'supernet_widths', 'controller_placement',
    'tpu_iterations_per_loop', 'save_checkpoints_steps',
    'keep_checkpoint_max', 'log_every_steps'})
# Which weights score the validation batch (docs/method.md section 5): the
# first is the released TuNAS's behaviour and the default.
VALIDATION_WEIGHTS = ('pre_update', 'post_update')
# How the supernet computes searched widths (docs/method.md section 4,
# "Computing at the sampled width"): 'auto' is 'masked' on TPU (XLA needs
# static shapes) and 'sampled' elsewhere. The values are the same either way
# (to float tolerance) and so are the variables, so the form may change
# when a run resumes (RUNTIME_FIELDS).
SUPERNET_WIDTHS = ('auto', 'sampled', 'masked')
# How RMSProp moves the shared weights a step's architecture does not use
# (docs/method.md, "Deferred steps of unused weights"): 'every_step' is
# TuNAS's optimiser, which steps every weight every step (unused ones move on
# their momentum); 'deferred' takes an unused weight's missed steps in closed
# form when it is next used or read, to the same values within float
# rounding (one replica off TPU); 'auto' is 'deferred' where it can run and
# 'every_step' elsewhere (TPU, several replicas), as `supernet_widths`
# computes at the sampled width off TPU. On this project's CPU deferring made
# search steps faster in both default spaces (17% and 2% at 64x64) and the
# op-choice tower of bench/step_cost.py cheaper, for a start-up a few seconds
# longer (docs/benchmarks.md).
# Not changeable on resume: a deferred checkpoint holds weights as of their
# last use. So config.json records what 'auto' resolved to (`settled`), and
# 'auto' resuming a run keeps that run's value (runs written before 'auto'
# existed stepped every weight every step).
UNUSED_WEIGHT_STEPS = ('auto', 'every_step', 'deferred')
# Where the step's scalar bookkeeping runs (the controller's sampling and
# update, the cost model, the reward, the schedules and the summary packing):
# 'host' pins it to the host CPU, 'default' leaves it to TensorFlow's placer,
# which puts every op with a GPU kernel on the GPU, as TuNAS's code does;
# 'auto' is 'host' when one replica runs on a GPU, else 'default'. On an H100
# those few hundred scalar ops each cost a kernel launch and were ~10% of a
# search step (docs/benchmarks.md, "GPU, 2026-11-26"); on the host they cost
# about a microsecond each. Values and variables are the same either way, so
# it may change on resume (RUNTIME_FIELDS).
CONTROLLER_PLACEMENTS = ('auto', 'host', 'default')
# Fields of a search that may change when it resumes; config.json then
# records the new value. Only the learning rates: they scale schedules that
# are computed from the global step, so the graph, every variable and every
# schedule boundary stay the same (Adam's moments do not depend on the rate;
# RMSProp's momentum slot holds rate-scaled updates, in which the old rate
# fades out within ~1/(1 - momentum) = 10 steps). Lowering them is how a run
# that stopped on a NaN loss resumes from its last finite checkpoint. The
# rest is refused, conservatively: it shapes the graph or the saved state,
# moves a schedule boundary, or changes the objective the weights were
# trained on (weight decay, label smoothing) halfway through a search.
RESUMABLE_FIELDS = frozenset({'model_learning_rate', 'rl_learning_rate'})


class ConfigError(ValueError):
  """A configuration value is invalid or incompatible with the model dir."""


class OtherJobError(ConfigError):
  """A config.json written by another kind of job than the one expected.

  Attributes:
    found: what the file holds ('train_eval run').
    expected: what was expected ('search').
    hint: what to do instead, appended to the message ('' for none).
  """

  def __init__(self, found: str, expected: str, hint: str = ''):
    super().__init__(f'{CONFIG_FILENAME} holds a {found}, not a {expected}'
                     + (f' ({hint})' if hint else ''))
    self.found = found
    self.expected = expected
    self.hint = hint

  def of(self, model_dir: str) -> str:
    """The message for `model_dir`, the dir holding the file."""
    return (f'{model_dir} holds a {self.found}, not a {self.expected}'
            + (f' ({self.hint})' if self.hint else ''))


# Keys of a field's metadata (see `option`).
HELP = 'help'
CHOICES = 'choices'


def option(default: Any, help_text: str,
           choices: Optional[Sequence[str]] = None) -> Any:
  """A config field with its default and its one-line command-line help.

  The CLIs in bin/ derive their flags from these fields (bin/config_flags.py):
  the flag takes the field's name, type, default and help, so each default
  is written once, here.

  Args:
    default: the field's default value.
    help_text: what the field means, as `--helpfull` shows it.
    choices: the only valid values, if there is such a set (the flag is then
      an enum); validation still checks them, for config.json too.

  Returns:
    A `dataclasses.field` with `help_text` (and `choices`) as its metadata.
  """
  metadata = {HELP: help_text}
  if choices is not None:
    metadata[CHOICES] = tuple(choices)
  return dataclasses.field(default=default, metadata=metadata)


class JobConfigMixin:
  """Derived values and persistence shared by the search and train/eval configs.

  Subclasses are frozen dataclasses with the training fields used below.
  """
  # Fields that may change on resume (config.json then records the new
  # value); none unless a subclass says otherwise.
  resumable_fields: ClassVar[FrozenSet[str]] = frozenset()

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
    return 3e-5 if self.use_bfloat16 else 4e-5  # docs/method.md section 2.

  @property
  def scaled_model_learning_rate(self) -> float:
    """Learning rate x batch/256 (docs/method.md section 6; Goyal et al. 2017)."""
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

  def resumable_changes(self, other) -> Dict[str, Tuple[Any, Any]]:
    """Resumable fields that differ from `other`'s: name -> (old, new).

    Args:
      other: the config of the run being resumed (read from config.json).
    """
    return {k: (getattr(other, k), getattr(self, k))
            for k in sorted(self.resumable_fields)
            if getattr(self, k) != getattr(other, k)}

  @classmethod
  def from_json_values(cls, values: Dict[str, Any]):
    """Builds the config from parsed JSON, refusing unknown fields."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ConfigError(f'unknown config field(s) {unknown}')
    if isinstance(values.get('class_names'), list):
      # JSON has no tuples; a resumed config must compare equal.
      values = dict(values, class_names=tuple(values['class_names']))
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class JobFields(JobConfigMixin):
  """What every job must name; no defaults.

  They come first in every job config: Python 3.9's dataclasses (no
  `kw_only`) need every field without a default before those with one.
  """
  search_space: str
  model_dir: str
  num_classes: int
  num_train_examples: int


@dataclasses.dataclass(frozen=True)
class TrainingFields(JobFields):
  """Fields every training job has (search and stand-alone train/eval).

  Learning rates are per 256 training images (docs/method.md section 6).
  """
  dataset: str = option('embedded', 'Dataset: a registered name, or tfds:NAME '
                        'for another TFDS dataset.')
  data_dir: Optional[str] = option(
      None, 'TFDS data directory (not needed for the embedded dataset). '
      'Nothing is ever downloaded.')
  image_size: int = option(224, 'Input resolution (pixels per side).')
  input_channels: int = option(3, 'Channels of the input images (from the '
                               'dataset).')
  class_names: Tuple[str, ...] = option(
      (), 'Class names by label, where the dataset has them (folder:PATH: '
      'its class folders).')
  # Training recipe (docs/method.md sections 2 and 6).
  train_batch_size: int = option(4096, 'Global training batch size (all '
                                 'replicas together).')
  epochs: float = option(90.0, 'Epochs over the training split.')
  max_steps: Optional[int] = option(None, 'Number of training steps; '
                                    'overrides --epochs.')
  model_learning_rate: float = option(0.165, 'RMSProp learning rate per 256 '
                                      'images.')
  model_warmup_steps_fraction: float = option(
      0.025, 'Fraction of steps of linear learning-rate warm-up.')
  model_momentum: float = option(0.9, 'RMSProp momentum.')
  model_rmsprop_decay: float = option(0.9, 'RMSProp decay of the mean '
                                      'squared gradient.')
  model_rmsprop_epsilon: float = option(1.0, 'RMSProp epsilon.')
  # None picks docs/method.md's default: 4e-5, or 3e-5 when training in
  # bfloat16 (`weight_decay`).
  model_weight_decay: Optional[float] = option(
      None, 'L2 weight decay (default 4e-5, or 3e-5 in bfloat16).')
  label_smoothing: float = option(0.1, 'Label smoothing.')
  # Execution.
  use_bfloat16: bool = option(False, 'Compute in bfloat16.')
  use_tpu: bool = option(False, 'Run on Cloud TPU (needs --tpu).')
  tpu: Optional[str] = option(None, 'Cloud TPU name or grpc:// address.')
  tpu_zone: Optional[str] = option(None, 'Cloud TPU zone.')
  gcp_project: Optional[str] = option(None, 'Google Cloud project.')
  num_replicas: int = option(1, 'Replicas the batches are split over: TPU '
                             'cores, or (search) local GPUs.')
  tpu_iterations_per_loop: int = option(
      100, 'Steps per host loop; summaries are written this often.')
  save_checkpoints_steps: Optional[int] = option(
      None, 'Checkpoint interval (default: every 5 host loops, and always at '
      'the end).')
  keep_checkpoint_max: int = option(5, 'Checkpoints kept (0: all).')
  log_every_steps: Optional[int] = option(
      None, 'Progress is logged every this many steps (default: every host '
      'loop, or 20 times a run if that is more often).')
  seed: Optional[int] = option(None, 'Random seed (graph and input), 0..2^63-1.')


@dataclasses.dataclass(frozen=True)
class SearchConfig(TrainingFields):
  """Everything a search needs besides the model spec.

  Learning rates are given per 256 training images and scaled by
  `train_batch_size / 256` (docs/method.md sections 5-6). `use_bfloat16` is a
  plain bool here: the CLI resolves its `auto` default through the search
  space registry, which the library never imports.
  """
  resumable_fields: ClassVar[FrozenSet[str]] = RESUMABLE_FIELDS
  # Controller (docs/method.md section 5).
  rl_learning_rate: float = option(3e-4, 'Controller Adam learning rate per '
                                   '256 images.')
  use_exponential_rl_learning_rate_schedule: bool = option(
      True, 'Multiply the controller learning rate by 10^progress after the '
      'RL delay.')
  rl_entropy_regularization: float = option(
      0.0, 'Weight of the entropy bonus in the controller loss.')
  rl_baseline_momentum: float = option(0.95, 'Momentum of the EMA reward '
                                       'baseline.')
  rl_batch_size_multiplier: float = option(
      4.0, 'Validation batch = this x training batch.')
  rl_delay_steps_fraction: float = option(
      0.25, 'Fraction of steps before the controller starts learning.')
  rl_temperature: float = option(1.0, 'Controller sampling temperature.')
  increase_ops_warmup_steps_fraction: float = option(
      0.25, 'Fraction of steps of op warm-up (all ops on, decaying).')
  increase_filters_warmup_steps_fraction: float = option(
      0.25, 'Fraction of steps of filter warm-up (widest, decaying).')
  rl_reward_function: str = option(
      'abs', 'Reward function combining accuracy and cost.')
  cost_model: str = option('pixel1_latency', 'Cost model of the reward; '
                           'none for plain accuracy.')
  # The space whose Pixel-1 latency model scores the search; None: the
  # search space itself. Read it through `effective_cost_model_space`.
  cost_model_space: Optional[str] = option(
      None, 'Space whose Pixel-1 latency model scores the search (default: '
      'the search space).')
  cost_model_file: Optional[str] = option(
      None, 'Latency model of --cost_model=measured: the latency_model.json '
      'that bin/calibrate_latency.py writes.')
  rl_cost_model_target: Optional[float] = option(
      None, 'Cost target of the reward (needed unless --cost_model=none).')
  rl_cost_model_exponent: float = option(-0.10, 'Cost exponent beta of the '
                                         'reward.')
  # Test hook: when set, the reward uses this instead of validation accuracy.
  constant_validation_accuracy: Optional[float] = option(
      None, 'Testing aid: use this accuracy in the reward instead of the '
      'measured one.')
  # Execution (see TrainingFields for the rest).
  use_gradient_sync_barrier: bool = option(
      True, 'Compute all weight gradients before applying any (and, with '
      'post_update validation, validate after the update).')
  # Which weights score the validation batch (docs/method.md): 'pre_update'
  # (the weights read before this step's update, as the released TuNAS and
  # its published results) or 'post_update' (after the update).
  validation_weights: str = option(
      'pre_update', 'Weights that score the validation batch: pre_update '
      "(read before the step's update, as the released TuNAS) or "
      'post_update.', choices=VALIDATION_WEIGHTS)
  supernet_widths: str = option(
      'auto', 'How the supernet computes searched widths: sampled (slice the '
      'weights to the sampled width, so a step costs what the sampled '
      'network costs), masked (the largest width with masked channels, as '
      'TuNAS; static shapes) or auto (masked on TPU, else sampled).',
      choices=SUPERNET_WIDTHS)
  unused_weight_steps: str = option(
      'auto', 'How RMSProp moves the shared weights a step does not use: '
      'every_step (as TuNAS: every weight takes a step every step, unused '
      'ones on their momentum), deferred (an unused weight takes its missed '
      'steps in closed form when next used: the same values to float '
      'rounding, updating only the sampled path; one replica off TPU; '
      'faster, see the README) or auto (deferred where it can run, else '
      'every_step; resuming a run keeps its value).',
      choices=UNUSED_WEIGHT_STEPS)
  controller_placement: str = option(
      'auto', "Where the controller, cost model, reward, schedules and "
      'summary packing run: host (the host CPU), default (TensorFlow\'s '
      'placement: the GPU, where there is one) or auto (host when one '
      'replica runs on a GPU, else default).',
      choices=CONTROLLER_PLACEMENTS)
  multi_worker: bool = option(
      False, 'Run as one worker of a search over several hosts, as the '
      'TF_CONFIG environment variable describes them '
      '(MultiWorkerMirroredStrategy); num_replicas counts the devices of '
      'all workers.')

  def __post_init__(self):
    _validate(self)

  # Derived values -----------------------------------------------------------

  @property
  def validation_batch_size(self) -> int:
    """Per-step controller batch: `rl_batch_size_multiplier` x training."""
    return int(round(self.train_batch_size * self.rl_batch_size_multiplier))

  @property
  def width_form(self) -> str:
    """The builder's `width_form`: `supernet_widths` with 'auto' resolved."""
    if self.supernet_widths == 'auto':
      return 'masked' if self.use_tpu else 'sampled'
    return self.supernet_widths

  @property
  def defers_unused_weight_steps(self) -> bool:
    """Whether unused weights' RMSProp steps are deferred ('auto' resolved)."""
    if self.unused_weight_steps == 'auto':
      return _can_defer(self)
    return self.unused_weight_steps == 'deferred'

  def settled(self, old: Optional['SearchConfig'] = None) -> 'SearchConfig':
    """This config with 'auto' `unused_weight_steps` made concrete.

    What config.json records: the checkpoints' layout depends on it, so a
    resume must not resolve it anew. Resuming `old` (the model dir's config),
    'auto' keeps its value; a new run gets 'deferred' where it can run.
    """
    if self.unused_weight_steps != 'auto':
      return self
    if old is not None and old.unused_weight_steps != 'auto':
      value = old.unused_weight_steps
    else:
      value = 'deferred' if self.defers_unused_weight_steps else 'every_step'
    return dataclasses.replace(self, unused_weight_steps=value)

  def controller_on_host(self, has_gpu: bool) -> bool:
    """Whether the step pins its scalar bookkeeping to the host CPU.

    `controller_placement` with 'auto' resolved: the host when one replica
    runs on a GPU (`has_gpu`).
    """
    if self.controller_placement == 'auto':
      return has_gpu and _one_local_replica(self)
    return self.controller_placement == 'host'

  @property
  def scaled_rl_learning_rate(self) -> float:
    """Controller learning rate x batch/256 (docs/method.md section 5)."""
    return self.rl_learning_rate * self.train_batch_size / 256

  @property
  def effective_cost_model_space(self) -> str:
    """`cost_model_space`, else the search space: where costs are scored.

    The one rule for the search step's reward and `cost_models.context_for`.
    """
    return self.cost_model_space or self.search_space

  # Persistence --------------------------------------------------------------

  @classmethod
  def from_json(cls, text: str) -> 'SearchConfig':
    """Parses `to_json()`'s output.

    Raises:
      OtherJobError: for a train_eval run's config.json.
      ConfigError: for unknown fields or invalid values.
    """
    values = json.loads(text)
    # A train_eval run's config names its architecture (`indices`), which a
    # search's never does: said as such, not as a list of unknown fields.
    if isinstance(values, dict) and 'indices' in values:
      raise OtherJobError('train_eval run', 'search')
    if isinstance(values, dict):
      # Written before the field existed: every weight was stepped every
      # step, and the checkpoints hold no deferred state.
      values.setdefault('unused_weight_steps', 'every_step')
    return cls.from_json_values(values)

  def incompatibilities(self, other: 'SearchConfig') -> Dict[str, Any]:
    """Fields that may not change on resume: name -> (old, new).

    Everything outside RUNTIME_FIELDS and RESUMABLE_FIELDS, with 'auto'
    `unused_weight_steps` as `settled` resolves it against `other`.
    """
    mine = dataclasses.asdict(self.settled(other))
    theirs = dataclasses.asdict(other.settled())
    free = RUNTIME_FIELDS | RESUMABLE_FIELDS
    return {k: (theirs[k], mine[k]) for k in mine
            if k not in free and mine[k] != theirs[k]}


def check(condition: bool, message: str) -> None:
  """Raises ConfigError(message) unless `condition`."""
  if not condition:
    raise ConfigError(message)


# TensorFlow's graph and op seeds are int64.
MAX_SEED = 2**63 - 1


def check_seed(seed: Optional[int]) -> None:
  """Refuses a seed outside 0..MAX_SEED (numpy's generators take no
  negative one); None is fine.

  The one rule for every job's seed: a search's, a train_eval run's, a
  calibration's and a random sample's.
  """
  check(seed is None or seed >= 0, f'seed must be >= 0, got {seed}')
  check(seed is None or seed <= MAX_SEED,
        f'seed must be at most {MAX_SEED}, got {seed}')


def check_image_size(image_size: int) -> None:
  """Refuses an input side outside MIN_IMAGE_SIZE..MAX_IMAGE_SIZE.

  The one rule for every tool that takes an image size.
  """
  check(MIN_IMAGE_SIZE <= image_size <= MAX_IMAGE_SIZE,
        f'image_size {image_size} is outside the valid range '
        f'{MIN_IMAGE_SIZE}..{MAX_IMAGE_SIZE}')


def check_cost_model_file(cost_model: str,
                          cost_model_file: Optional[str]) -> None:
  """A latency model file goes with cost model `measured`, and only with it.

  Raises:
    ConfigError: for `measured` without a file, or a file with another
      cost model (which would silently ignore it).
  """
  if cost_model == 'measured':
    check(bool(cost_model_file), 'cost_model=measured needs cost_model_file '
          '(a latency_model.json of bin/calibrate_latency.py)')
  else:
    check(not cost_model_file, 'cost_model_file is only read by '
          f'cost_model=measured, not {cost_model!r}')


def _check_finite(c: Any) -> None:
  """Refuses inf and NaN in every float field (NaN passes no range check)."""
  for field in dataclasses.fields(c):
    value = getattr(c, field.name)
    check(not isinstance(value, float) or math.isfinite(value),
          f'{field.name} must be a finite number, got {value}')


def _check_fraction(c: Any, name: str, upper_open: bool = False) -> None:
  """`name` must be in [0, 1] (or [0, 1) when `upper_open`)."""
  value = getattr(c, name)
  if upper_open:
    check(0.0 <= value < 1.0, f'{name} must be in [0, 1), got {value}')
  else:
    check(0.0 <= value <= 1.0, f'{name} must be in [0, 1], got {value}')


def validate_training(c: Any, mirrored: bool = False) -> None:
  """Checks the fields every training job has (search and train/eval).

  Args:
    c: the config.
    mirrored: whether the job runs several replicas off TPU (the devices of
      one host through tf.distribute); otherwise that needs use_tpu.

  Raises:
    ConfigError: naming the first invalid value and its valid range.
  """
  _check_finite(c)
  check(c.num_replicas > 0, f'num_replicas must be positive, got '
        f'{c.num_replicas}')
  check(c.train_batch_size > 0,
        f'train_batch_size must be positive, got {c.train_batch_size}')
  check(c.train_batch_size % c.num_replicas == 0,
        f'train_batch_size {c.train_batch_size} is not divisible by the '
        f'{c.num_replicas} replicas; use a multiple of {c.num_replicas}')
  check(mirrored or c.use_tpu or c.num_replicas == 1,
        f'num_replicas={c.num_replicas} needs use_tpu; CPU/GPU runs use one '
        'replica')
  check_image_size(c.image_size)
  check_seed(c.seed)
  check(c.num_classes > 1, f'num_classes must be > 1, got {c.num_classes}')
  check(c.max_steps is None or c.max_steps > 0,
        f'max_steps must be positive, got {c.max_steps}')
  check(c.max_steps is not None or (c.epochs > 0 and
                                    c.num_train_examples > 0),
        'epochs and the training split size must be positive (or give '
        f'max_steps); got epochs={c.epochs}, '
        f'num_train_examples={c.num_train_examples}')
  _validate_optimizer(c)
  _validate_execution(c)


def _validate_optimizer(c: Any) -> None:
  """The shared-weight RMSProp recipe (docs/method.md section 6)."""
  _check_fraction(c, 'model_warmup_steps_fraction')
  check(c.model_learning_rate > 0, 'model_learning_rate must be positive, '
        f'got {c.model_learning_rate}')
  # A momentum or decay of 1 never forgets: the update grows without bound.
  _check_fraction(c, 'model_momentum', upper_open=True)
  _check_fraction(c, 'model_rmsprop_decay', upper_open=True)
  check(c.model_rmsprop_epsilon >= 0, 'model_rmsprop_epsilon must be >= 0, '
        f'got {c.model_rmsprop_epsilon}')
  _check_fraction(c, 'label_smoothing', upper_open=True)
  check(c.model_weight_decay is None or c.model_weight_decay >= 0,
        f'model_weight_decay must be >= 0, got {c.model_weight_decay}')


def _validate_execution(c: Any) -> None:
  """Host loops, checkpoints and logging."""
  check(c.tpu_iterations_per_loop > 0, 'tpu_iterations_per_loop must be '
        f'positive, got {c.tpu_iterations_per_loop}')
  check(c.save_checkpoints_steps is None or c.save_checkpoints_steps > 0,
        'save_checkpoints_steps must be positive (or unset: every 5 host '
        f'loops), got {c.save_checkpoints_steps}')
  check(c.keep_checkpoint_max >= 0, 'keep_checkpoint_max must be >= 0 (0 '
        f'keeps every checkpoint), got {c.keep_checkpoint_max}')
  check(c.log_every_steps is None or c.log_every_steps > 0,
        f'log_every_steps must be positive, got {c.log_every_steps}')


def _one_local_replica(c: SearchConfig) -> bool:
  """One replica off TPU: a CPU or a single GPU runs the whole step."""
  return not c.use_tpu and c.num_replicas == 1 and not c.multi_worker


def _can_defer(c: SearchConfig) -> bool:
  """Whether unused weights' steps can be deferred: one replica off TPU.

  Replicas sampling different architectures average their gradients, so a
  weight one of them leaves unused still takes a step.
  """
  return _one_local_replica(c)


def _validate(c: SearchConfig) -> None:
  """Raises ConfigError naming the first invalid value."""
  # A search mirrors over the local devices off TPU (tpu.make_strategy).
  validate_training(c, mirrored=True)
  check(c.validation_batch_size % c.num_replicas == 0,
        f'validation batch {c.validation_batch_size} (train_batch_size x '
        f'rl_batch_size_multiplier) is not divisible by the {c.num_replicas} '
        'replicas')
  _validate_schedule(c)
  check(c.rl_learning_rate >= 0, 'rl_learning_rate must be >= 0 (0 freezes '
        f'the controller), got {c.rl_learning_rate}')
  _check_fraction(c, 'rl_baseline_momentum', upper_open=True)
  check(c.rl_batch_size_multiplier >= 1 and
        float(c.rl_batch_size_multiplier).is_integer(),
        'rl_batch_size_multiplier must be a whole number >= 1, got '
        f'{c.rl_batch_size_multiplier}')
  check(c.rl_temperature > 0, f'rl_temperature must be positive, got '
        f'{c.rl_temperature}')
  check(c.cost_model == 'none' or c.rl_cost_model_target is not None,
        f'cost model {c.cost_model!r} needs rl_cost_model_target')
  check_cost_model_file(c.cost_model, c.cost_model_file)
  check(c.rl_cost_model_target is None or c.rl_cost_model_target > 0,
        f'rl_cost_model_target must be positive, got '
        f'{c.rl_cost_model_target}')
  check(c.constant_validation_accuracy is None or
        0.0 <= c.constant_validation_accuracy <= 1.0,
        'constant_validation_accuracy must be in [0, 1], got '
        f'{c.constant_validation_accuracy}')
  check(c.validation_weights in VALIDATION_WEIGHTS,
        f'unknown validation_weights {c.validation_weights!r}; valid '
        f'choices: {", ".join(VALIDATION_WEIGHTS)}')
  check(c.supernet_widths in SUPERNET_WIDTHS,
        f'unknown supernet_widths {c.supernet_widths!r}; valid choices: '
        f'{", ".join(SUPERNET_WIDTHS)}')
  check(c.unused_weight_steps in UNUSED_WEIGHT_STEPS,
        f'unknown unused_weight_steps {c.unused_weight_steps!r}; valid '
        f'choices: {", ".join(UNUSED_WEIGHT_STEPS)}')
  check(c.unused_weight_steps != 'deferred' or _can_defer(c),
        'unused_weight_steps=deferred needs one replica off TPU (replicas '
        'sampling different architectures share their gradients); use '
        'every_step')
  check(c.controller_placement in CONTROLLER_PLACEMENTS,
        f'unknown controller_placement {c.controller_placement!r}; valid '
        f'choices: {", ".join(CONTROLLER_PLACEMENTS)}')
  check(c.controller_placement != 'host' or _one_local_replica(c),
        'controller_placement=host needs one replica off TPU (a replica\'s '
        'controller runs on its own device); use auto or default')
  check(not (c.use_tpu and c.supernet_widths == 'sampled'),
        'supernet_widths=sampled cannot run on TPU: XLA needs static shapes; '
        'use masked or auto')


def _validate_schedule(c: SearchConfig) -> None:
  """The controller's delay and the warm-ups (docs/method.md section 5)."""
  _check_fraction(c, 'rl_delay_steps_fraction')
  for name in ('increase_ops_warmup_steps_fraction',
               'increase_filters_warmup_steps_fraction'):
    _check_fraction(c, name)
    # docs/method.md section 5; the original refuses it too: the controller starts
    # learning only once the warm-up networks (all ops on, widest filters)
    # are gone.
    value = getattr(c, name)
    check(value <= c.rl_delay_steps_fraction,
          f'{name}={value} is larger than rl_delay_steps_fraction='
          f'{c.rl_delay_steps_fraction}; the warm-up must end before the '
          'controller starts learning')


def _write_atomically(path: str, text: str) -> None:
  """Writes `path` through a temporary file, so it is whole or unchanged."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path + '.tmp', 'w') as f:
    f.write(text)
  tf.io.gfile.rename(path + '.tmp', path, overwrite=True)


def _read(path: str) -> str:
  """The text of a local or gs:// file."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path) as f:
    return f.read()


def load_existing(cls, path: str):
  """The config a model dir holds, or one line saying why it cannot be read.

  Args:
    cls: the config class expected (SearchConfig or TrainEvalConfig).
    path: the model dir's config.json.

  Raises:
    ConfigError: for a config of another kind of job, a file that is not
      JSON, not an object, misses fields, has unknown or wrongly typed ones,
      or fails validation.
  """
  try:
    return cls.from_json(_read(path))
  except OtherJobError as e:
    raise ConfigError(f'model dir {e.of(os.path.dirname(path))}; use '
                      'another --model_dir') from None
  except ConfigError as e:
    raise ConfigError(f'{path} cannot be used: {e}') from None
  except (ValueError, TypeError, AttributeError) as e:
    # json errors, missing fields (TypeError from the dataclass), a list
    # instead of an object (AttributeError), wrong types failing checks.
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise ConfigError(f'{path} is damaged or not a tunas_search config '
                      f'({reason}); restore it or use another --model_dir'
                      ) from None


def _check_resume(config: Any, old: Any, spec_path: str,
                  model_spec_json: str) -> None:
  """Raises ConfigError unless `config` may resume the run `old` started."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
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
  if (tf.io.gfile.exists(spec_path) and
      _read(spec_path) != model_spec_json):
    raise ConfigError(f'model dir {config.model_dir} holds a different '
                      'model spec (the search space definition changed)')


def settle(config: SearchConfig) -> SearchConfig:
  """`config.settled` against the config its model dir holds, if any.

  Raises:
    ConfigError: if the model dir's config.json cannot be read
      (`load_existing`).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(config.model_dir, CONFIG_FILENAME)
  old = (load_existing(SearchConfig, path) if tf.io.gfile.exists(path)
         else None)
  return config.settled(old)


def write_or_check(config: Any, model_spec_json: str) -> bool:
  """Writes config.json and model_spec.json, or checks them on resume.

  On a resume that changes `config.resumable_fields` (a search's learning
  rates, RESUMABLE_FIELDS), config.json is rewritten atomically with the new
  values and a log line names each change.

  Args:
    config: this run's config: a SearchConfig, or any config class with the
      same `search_space`, `model_dir`, `to_json`, `from_json`,
      `incompatibilities` and `resumable_changes` (train_eval's
      TrainEvalConfig).
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
  if tf.io.gfile.exists(config_path):
    old = load_existing(type(config), config_path)
    _check_resume(config, old, spec_path, model_spec_json)
    changes = config.resumable_changes(old)
    if changes:
      _write_atomically(config_path, dataclasses.replace(
          old, **{k: new for k, (_, new) in changes.items()}).to_json())
      logging.info('Resuming %s with changed %s (config.json updated)',
                   config.model_dir, ', '.join(
                       f'{k} {a!r} -> {b!r}'
                       for k, (a, b) in changes.items()))
    return True
  tf.io.gfile.makedirs(config.model_dir)
  _write_atomically(spec_path, model_spec_json)
  _write_atomically(config_path, config.to_json())
  return False
