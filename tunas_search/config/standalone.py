"""The one typed, validated configuration of a stand-alone train/eval job.

`bin/train_eval.py` turns flags into a `TrainEvalConfig`. Like a search's
`SearchConfig` it is written to the model dir as `config.json` (with the
searched space's `model_spec.json`) by `tunas_search.config.write_or_check`
and checked when a run resumes, so a model dir never mixes architectures.
Defaults are the TuNAS recipe (docs/method.md sections 2, 6 and 7).
"""

import dataclasses
import json
from typing import Any, Dict, Optional

from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search.config import ConfigError
from tunas_search.config import option

MODES = ('train', 'evaluate', 'train_and_eval')
TRAIN_SPLITS = ('train', 'train_full')
EVAL_SPLITS = ('test', 'validation')
# docs/method.md section 7: no dropout before the classifier below 150 epochs.
DROPOUT_FREE_EPOCHS = 150.0
# From 150 epochs on the source gives no rate (docs/method.md section 7,
# "Stand-alone training"); 0.2 is the rate MobileNetV2 (Sandler et al. 2018)
# and MnasNet (Tan et al. 2019) train with. Ours.
LONG_RUN_DROPOUT_RATE = 0.2

# May differ between the run that wrote a model dir and one that resumes or
# evaluates it: where things are, how often to log, save and evaluate, and
# what to evaluate on. Nothing that changes the trained weights.
RUNTIME_FIELDS = frozenset({
    'model_dir', 'data_dir', 'tpu', 'tpu_zone', 'gcp_project',
    'tpu_iterations_per_loop', 'save_checkpoints_steps',
    'keep_checkpoint_max', 'log_every_steps', 'mode', 'eval_split',
    'eval_batch_size', 'steps_per_eval'})
# What an evaluation must agree on with the run that trained the checkpoint:
# the inference graph.
ARCHITECTURE_FIELDS = frozenset({
    'search_space', 'indices', 'num_classes', 'image_size',
    'input_channels'})


@dataclasses.dataclass(frozen=True)
class TrainEvalConfig(config_lib.TrainingFields):
  """Everything stand-alone training/evaluation needs besides the model spec.

  Every field with a default says what it means in its help metadata
  (`config_lib.option`). Besides:
    search_space: name of the space `indices` index (a registered space or
      reference net, or the name a search dir recorded).
    num_train_examples: size of `train_split` (epochs -> steps).
  """
  # Required (validated); a default only because Python 3.9 dataclasses put
  # the fields of JobFields, which have none, first.
  indices: str = option('', 'Architecture string a:b:c:... (one choice per '
                        'decision of the space).')
  mode: str = option('train_and_eval', 'What to do.', choices=MODES)
  # docs/method.md sections 6 and 7.
  train_split: str = option(
      'train', 'train: the search-training split; train_full: all official '
      'training images (final test runs).', choices=TRAIN_SPLITS)
  eval_split: str = option(
      'test', 'test: the official test/validation set; validation: held out '
      'from training, to rank candidates.', choices=EVAL_SPLITS)
  # Recipe additions (docs/method.md section 7); the rest is in TrainingFields.
  eval_batch_size: int = option(1000, 'Global evaluation batch size.')
  steps_per_eval: Optional[int] = option(
      None, 'train_and_eval: evaluate every this many steps (default: at the '
      'end).')
  # None: docs/method.md section 7 (`effective_dropout_rate`).
  dropout_rate: Optional[float] = option(
      None, 'Dropout before the classifier (default 0 below '
      f'{DROPOUT_FREE_EPOCHS:g} epochs, else {LONG_RUN_DROPOUT_RATE}).')
  path_dropout_rate: float = option(0.0, 'Stochastic depth on residual '
                                    'branches.')
  init_from_search: Optional[str] = option(
      None, 'Start from the shared weights of this search model dir '
      '(fine-tuning).')
  freeze_backbone: bool = option(False, 'Train only the classifier (a linear '
                                 'probe of the initial features).')

  def __post_init__(self):
    _validate(self)

  # Derived values -----------------------------------------------------------

  @property
  def total_epochs(self) -> float:
    """Epochs the run trains for (from `max_steps` when it is given)."""
    if self.max_steps is None or not self.num_train_examples:
      return self.epochs
    return self.max_steps * self.train_batch_size / self.num_train_examples

  @property
  def effective_dropout_rate(self) -> float:
    if self.dropout_rate is not None:
      return self.dropout_rate
    if self.total_epochs < DROPOUT_FREE_EPOCHS:
      return 0.0  # docs/method.md section 7.
    return LONG_RUN_DROPOUT_RATE

  @property
  def warmup_steps(self) -> int:
    return self.fraction_steps(self.model_warmup_steps_fraction)

  # Persistence --------------------------------------------------------------

  @classmethod
  def from_json(cls, text: str) -> 'TrainEvalConfig':
    """Parses `to_json()`'s output.

    Raises:
      OtherJobError: for a search's config.json.
      ConfigError: for unknown fields or invalid values.
    """
    values = json.loads(text)
    if isinstance(values, dict) and 'rl_learning_rate' in values:
      raise config_lib.OtherJobError(
          'search', 'train_eval run',
          hint='--search_model_dir or --init_from_search use a search')
    return cls.from_json_values(values)

  def incompatibilities(self, other: 'TrainEvalConfig') -> Dict[str, Any]:
    """Fields that may not change: name -> (old, new).

    Training compares everything outside RUNTIME_FIELDS; an evaluation only
    the ARCHITECTURE_FIELDS, so the same checkpoint can be evaluated with a
    command line that leaves out the training flags.
    """
    mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
    if self.mode == 'evaluate':
      keys = ARCHITECTURE_FIELDS
    else:
      keys = set(mine) - RUNTIME_FIELDS
    return {k: (theirs[k], mine[k]) for k in sorted(keys)
            if mine[k] != theirs[k]}


_check = config_lib.check


def _check_choice(name: str, value: str, valid) -> None:
  _check(value in valid, f'unknown {name} {value!r}; valid choices: '
         f'{", ".join(valid)}')


def _validate(c: TrainEvalConfig) -> None:
  """Raises ConfigError naming the first invalid value."""
  _check_choice('mode', c.mode, MODES)
  _check_choice('train_split', c.train_split, TRAIN_SPLITS)
  _check_choice('eval_split', c.eval_split, EVAL_SPLITS)
  _check(not (c.train_split == 'train_full' and c.eval_split == 'validation'),
         'eval_split validation is part of train_split train_full; evaluate '
         'on test, or train on train')
  _check(bool(c.indices), 'indices (the architecture string) is required')
  try:
    architecture.parse_indices(c.indices)
  except architecture.ArchitectureError as e:
    raise ConfigError(f'indices: {e}') from None
  config_lib.validate_training(c)
  _check(c.eval_batch_size > 0,
         f'eval_batch_size must be positive, got {c.eval_batch_size}')
  _check(c.eval_batch_size % c.num_replicas == 0,
         f'eval_batch_size {c.eval_batch_size} is not divisible by the '
         f'{c.num_replicas} replicas; use a multiple of {c.num_replicas}')
  _check(c.steps_per_eval is None or c.steps_per_eval > 0,
         f'steps_per_eval must be positive, got {c.steps_per_eval}')
  for name in ('dropout_rate', 'path_dropout_rate'):
    value = getattr(c, name)
    _check(value is None or 0.0 <= value < 1.0,
           f'{name} must be in [0, 1), got {value}')
