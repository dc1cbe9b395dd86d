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
from typing import Any, ClassVar, Dict, FrozenSet, Optional, Sequence, Tuple

from tunas_search.config import validation
from tunas_search.config.persistence import OtherJobError
from tunas_search.config.validation import CONTROLLER_PLACEMENTS
from tunas_search.config.validation import ConfigError
from tunas_search.config.validation import STEP_BUILDS
from tunas_search.config.validation import SUPERNET_WIDTHS
from tunas_search.config.validation import UNUSED_WEIGHT_STEPS
from tunas_search.config.validation import VALIDATION_WEIGHTS

# Fields that may differ between the run that wrote a model dir and a run
# that resumes it: where things are and how often to log/save, nothing that
# changes the graph, the schedules or the meaning of a checkpoint.
RUNTIME_FIELDS = frozenset({
    'model_dir', 'data_dir', 'tpu', 'tpu_zone', 'gcp_project',
    'cost_model_file', 'supernet_widths', 'controller_placement',
    'step_build', 'tpu_iterations_per_loop', 'save_checkpoints_steps',
    'keep_checkpoint_max', 'log_every_steps'})
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
# Fields whose resolved value the step plan checks on resume instead
# (config/plan.py): 'auto' resuming a run means that run's value.
PLANNED_FIELDS = frozenset({'unused_weight_steps'})


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


def same_option(config_class: type, name: str,
                help_text: Optional[str] = None) -> Any:
  """Another job's field of the same meaning: `config_class`'s default, once.

  For a field one job shares with another, e.g. the evaluation's stand-alone
  recipe and execution fields (config/evaluation.py), which are training's.

  Args:
    config_class: the config dataclass that defines the field.
    name: the field's name there.
    help_text: the help where it says more than `config_class`'s (the field's
      role in this job); `config_class`'s help if None.

  Returns:
    An `option` with `config_class`'s default, choices and help_text.
  """
  field = {f.name: f for f in dataclasses.fields(config_class)}[name]
  return option(field.default, help_text or field.metadata[HELP],
                field.metadata.get(CHOICES))


class JobConfigMixin:
  """Derived values and persistence shared by the search and train/eval configs.

  Subclasses are frozen dataclasses with the training fields used below.
  """
  # Fields that may change on resume (config.json then records the new
  # value); none unless a subclass says otherwise.
  resumable_fields: ClassVar[FrozenSet[str]] = frozenset()

  @property
  def total_steps(self) -> int:
    """Number of steps: `max_steps`, else `epochs` over the training split.

    Rounded down, as the released TuNAS counts steps (docs/method.md
    section 6): 90 epochs of 1,231,121 images at 4096 a step are 27,050.
    """
    if self.max_steps is not None:
      return self.max_steps
    return max(1, int(math.floor(
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
  # The space the cost model scores the search as; None: the search space
  # itself. Read it through `effective_cost_model_space`.
  cost_model_space: Optional[str] = option(
      None, 'Space the cost model scores the search as (default: the search '
      'space): pixel1_latency uses the Pixel-1 model fitted to this space, '
      'measured needs a latency model calibrated on it; madds and params '
      'count any space and ignore it.')
  cost_model_file: Optional[str] = option(
      None, 'Latency model of --cost_model=measured: the latency_model.json '
      'that bin/calibrate_latency.py writes.')
  rl_cost_model_target: Optional[float] = option(
      None, 'Cost target of the reward (needed unless --cost_model=none).')
  rl_cost_model_exponent: float = option(-0.10, 'Cost exponent beta of the '
                                         'reward.')
  # Test hook: when set, the reward uses this instead of validation accuracy
  # (the model_fn's wrapper gives the step `model_fn.constant_accuracy`; the
  # step itself reads no test switch).
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
      'see docs/method.md) or auto (deferred for a new run where it can '
      'run: one replica, the graph build, model_rmsprop_epsilon > 0; '
      'every_step elsewhere; resuming a run keeps its value).',
      choices=UNUSED_WEIGHT_STEPS)
  controller_placement: str = option(
      'auto', "Where the controller, cost model, reward, schedules and "
      'summary packing run: host (the host CPU), default (TensorFlow\'s '
      'placement: the GPU, where there is one) or auto (host when one '
      'replica runs on a GPU, else default).',
      choices=CONTROLLER_PLACEMENTS)
  step_build: str = option(
      'auto', 'What runs the step off TPU: graph (TensorFlow runs the graph '
      'op by op), xla (XLA compiles the whole step, as on TPU: masked '
      'widths, every weight stepped every step; for a GPU: on a CPU it '
      'compiles for minutes and runs slower) or auto (graph off TPU; a TPU '
      'step is always compiled).', choices=STEP_BUILDS)
  multi_worker: bool = option(
      False, 'Run as one worker of a search over several hosts, as the '
      'TF_CONFIG environment variable describes them '
      '(MultiWorkerMirroredStrategy); num_replicas counts the devices of '
      'all workers.')

  def __post_init__(self):
    validation.validate_search(self)

  # Derived values -----------------------------------------------------------

  @property
  def validation_batch_size(self) -> int:
    """Per-step controller batch: `rl_batch_size_multiplier` x training."""
    return int(round(self.train_batch_size * self.rl_batch_size_multiplier))

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

    Everything outside RUNTIME_FIELDS, RESUMABLE_FIELDS and PLANNED_FIELDS.
    """
    mine = dataclasses.asdict(self)
    theirs = dataclasses.asdict(other)
    free = RUNTIME_FIELDS | RESUMABLE_FIELDS | PLANNED_FIELDS
    return {k: (theirs[k], mine[k]) for k in mine
            if k not in free and mine[k] != theirs[k]}
