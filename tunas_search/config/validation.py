"""What makes a config valid: the checks every job shares, and a search's.

Each check raises `ConfigError` with one line naming the bad value and its
valid range or choices. The tuples of choices are the only valid values of
their fields (`fields.option(choices=...)`).
"""

import dataclasses
import math
from typing import Any, Optional

# TuNAS searches at 224x224; the smallest size every space can take is the
# smallest input that still leaves a 1x1 feature map after five stride-2 steps.
MIN_IMAGE_SIZE = 28
# The largest takes MobileNetV4-Conv-L's 384x384 with room to spare
# (docs/mobilenet_v4.md).
MAX_IMAGE_SIZE = 512

# Which weights score the validation batch (docs/method.md section 5): the
# first is the released TuNAS's behaviour and the default.
VALIDATION_WEIGHTS = ('pre_update', 'post_update')
# How the supernet computes searched widths (docs/method.md section 4,
# "Computing at the sampled width"); the step plan resolves 'auto'
# (config/plan.py). The values are the same either way (to float tolerance)
# and so are the variables, so the form may change when a run resumes
# (RUNTIME_FIELDS).
SUPERNET_WIDTHS = ('auto', 'sampled', 'masked')
# How RMSProp moves the shared weights a step's architecture does not use
# (docs/method.md, "Deferred steps of unused weights"): 'every_step' is
# TuNAS's optimiser, which steps every weight every step (unused ones move on
# their momentum); 'deferred' takes an unused weight's missed steps in closed
# form when it is next used or read, to the same values within float
# rounding (one replica off TPU). The step plan resolves 'auto' and keeps a
# resumed run's value: a deferred checkpoint holds weights as of their last
# use (config/plan.py).
UNUSED_WEIGHT_STEPS = ('auto', 'every_step', 'deferred')
# Where the step's scalar bookkeeping runs (the controller's sampling and
# update, the cost model, the reward, the schedules and the summary packing):
# 'host' pins it to the host CPU, 'default' leaves it to TensorFlow's placer,
# which puts every op with a GPU kernel on the GPU, as TuNAS's code does
# (docs/DESIGN.md, "The step plan"). Values and variables are the same either
# way, so it may change on resume (RUNTIME_FIELDS).
CONTROLLER_PLACEMENTS = ('auto', 'host', 'default')
# What runs the step off TPU (docs/DESIGN.md, "The step plan"): 'graph' is
# TensorFlow's executor running the graph op by op; 'xla' compiles the whole
# step into one XLA program, the masked-width program a TPU runs. 'auto' is
# graph off TPU until a GPU measurement says otherwise (docs/benchmarks.md,
# "One GPU at ImageNet scale"); a TPU step is always compiled. The variables
# are the same either way, so it may change on resume where the run's
# shared-weight update allows (RUNTIME_FIELDS, config/plan.py).
STEP_BUILDS = ('auto', 'graph', 'xla')
# What a search returns (results/selection.py): TuNAS's argmax, the
# controller's most probable sampled architecture in the cost window, or
# 'auto' (the argmax when it lies in the window, else in_window).
ARGMAX, IN_WINDOW, AUTO = 'argmax', 'in_window', 'auto'
SELECTION_RULES = (AUTO, ARGMAX, IN_WINDOW)
# TuNAS's random-search window: 83-85 ms around the 84 ms target
# (docs/method.md section 7), i.e. +-1.2% of the target.
RELATIVE_WINDOW = 0.012
# Architectures drawn from the controller (each distinct one costs a
# cost-model call, ~6-30 ms for the Pixel-1 model of a ProxylessNAS space):
# enough for their mean cost to about a millisecond (their spread is ~10 ms
# early in a search) and for in_window to find a dozen of them at the 5-10%
# that land in the window then.
SELECTION_SAMPLES = 200
# Random draws before the random search (search/random_search.py) gives up on
# a cost window: about two minutes of draws for the ProxylessNAS spaces (~6 ms
# per cost).
MAX_RANDOM_ATTEMPTS = 20000


class ConfigError(ValueError):
  """A configuration value is invalid or incompatible with the model dir."""


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


def one_local_replica(c: Any) -> bool:
  """One replica off TPU: a CPU or a single GPU runs the whole step."""
  return not c.use_tpu and c.num_replicas == 1 and not c.multi_worker


def can_defer(c: Any) -> bool:
  """Whether unused weights' steps can be deferred: one replica off TPU.

  Replicas sampling different architectures average their gradients, so a
  weight one of them leaves unused still takes a step.
  """
  return one_local_replica(c)


def validate_search(c: Any) -> None:
  """Raises ConfigError naming the first invalid value."""
  # A search mirrors over the local devices off TPU
  # (runtime.estimators.mirrored_strategy).
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
  check(c.unused_weight_steps != 'deferred' or can_defer(c),
        'unused_weight_steps=deferred needs one replica off TPU (replicas '
        'sampling different architectures share their gradients); use '
        'every_step')
  check(c.controller_placement in CONTROLLER_PLACEMENTS,
        f'unknown controller_placement {c.controller_placement!r}; valid '
        f'choices: {", ".join(CONTROLLER_PLACEMENTS)}')
  check(c.controller_placement != 'host' or one_local_replica(c),
        'controller_placement=host needs one replica off TPU (a replica\'s '
        'controller runs on its own device); use auto or default')
  check(not (c.use_tpu and c.supernet_widths == 'sampled'),
        'supernet_widths=sampled cannot run on TPU: XLA needs static shapes; '
        'use masked or auto')
  _validate_step_build(c)


def _validate_step_build(c: Any) -> None:
  """`step_build` against the replicas and the placement (the widths and
  the update an XLA build needs are the step plan's checks)."""
  check(c.step_build in STEP_BUILDS,
        f'unknown step_build {c.step_build!r}; valid choices: '
        f'{", ".join(STEP_BUILDS)}')
  check(not (c.use_tpu and c.step_build == 'graph'),
        'step_build=graph cannot run on TPU, which always compiles the step '
        'with XLA; use auto or xla')
  if c.step_build != 'xla' or c.use_tpu:
    return
  # Off TPU the model_fn compiles the step as one XLA computation on one
  # device (search.py): one replica, and every op on that device.
  check(one_local_replica(c), 'step_build=xla off TPU needs one replica (the '
        'step is compiled as one program on one device); use auto or graph')
  check(c.controller_placement != 'host', 'step_build=xla compiles the '
        'whole step on one device, so controller_placement=host cannot '
        'apply; use auto or default')


def _validate_schedule(c: Any) -> None:
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
