"""The step plan: the form of a search step, every `auto` resolved once.

A search step can take a few forms that compute the same method
(docs/DESIGN.md, "The step plan"): XLA's build or TensorFlow's graph, masked
or sampled widths, TuNAS's every-step RMSProp or the deferred update, which
weights score the validation batch, the gradient-sync barrier, where the
controller runs and the compute dtype. `resolve` decides them all at start,
against the config, what the machine offers (an `Environment`, which the
runner or a CLI probes: nothing below them looks at devices) and the plan of
the run a model dir holds; the library builds the step from the plan alone.
The runner logs the plan in one line and writes it beside config.json
(`PLAN_FILENAME`); a model dir written before plans existed resumes with the
plan it ran with (`previous`).
"""

import dataclasses
import json
import os
from typing import Optional

from tunas_search.config import persistence
from tunas_search.config import validation
from tunas_search.config.fields import SearchConfig
from tunas_search.config.validation import ConfigError

PLAN_FILENAME = 'step_plan.json'
# How RMSProp moves the shared weights (docs/method.md, "Deferred steps of
# unused weights"): TuNAS's optimiser steps every weight every step; the
# deferred form takes an unused weight's missed steps in closed form when it
# is next used. A checkpoint's layout depends on it, so a resumed run keeps
# the update it started with.
EVERY_STEP = 'every_step'
DEFERRED = 'deferred'
SHARED_UPDATES = (EVERY_STEP, DEFERRED)
WIDTH_FORMS = ('masked', 'sampled')
COMPUTE_DTYPES = ('float32', 'bfloat16')


@dataclasses.dataclass(frozen=True)
class Environment:
  """What the machine offers a step; probed by the runner or a CLI.

  Attributes:
    has_gpu: TensorFlow sees a GPU.
    xla: XLA compiles the step off TPU (tests, bench/xla_compile.py); a TPU
      step is always compiled.
  """
  has_gpu: bool = False
  xla: bool = False


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where a step runs: its replicas and processes (the config's, checked
  by `validation`).

  Attributes:
    use_tpu: TPU cores run the step (TPUEstimator compiles it; the input
      pipeline transposes images to HWCN).
    num_replicas: the replicas running the step in sync (TPU cores, or the
      devices of one host's MirroredStrategy); cross-replica means over
      them.
    multi_worker: several processes (hosts) run the search.
  """
  use_tpu: bool = False
  num_replicas: int = 1
  multi_worker: bool = False

  @property
  def one_process(self) -> bool:
    """One process computes the whole step: no TPU, one replica, one
    worker."""
    return not (self.use_tpu or self.num_replicas > 1 or self.multi_worker)


@dataclasses.dataclass(frozen=True)
class StepPlan:
  """The form of a search step (module docstring), frozen and checked.

  Attributes:
    xla: XLA compiles the step: the supernet is built with functional conds
      and static shapes (docs/xla.md), so widths are masked and every weight
      is stepped every step.
    width_form: 'masked' (the largest width with masked channels, TuNAS's
      form) or 'sampled' (the weights sliced to the sampled width;
      docs/method.md section 4).
    shared_update: 'every_step' (TuNAS's RMSProp) or 'deferred'.
    validation_weights: 'pre_update' or 'post_update' (docs/method.md
      section 5).
    gradient_sync_barrier: no weight is updated before every gradient
      exists.
    controller_on_host: the controller, cost model, reward, schedules and
      summary packing run on the host CPU (beside one GPU).
    compute_dtype: 'float32' or 'bfloat16' (variables stay float32; the
      controller, cost model and reward compute in float32 either way). The
      rule (`resolve`): bfloat16 exactly when `use_bfloat16`, on every
      device.
    compiled_by_model_fn: the model_fn wraps the step in one XLA
      computation itself (`step_build=xla` off TPU); on TPU the
      TPUEstimator compiles it, and tests and bench/xla_compile.py
      (`Environment(xla=True)`) wrap it themselves. Absent from plans
      written before it existed (False: they never compiled off TPU).
    layout: where the step runs (`Layout`). Absent from plans written
      before it existed (one replica in one process; such a plan is read
      only for its shared-weight update and its forms).
  """
  xla: bool
  width_form: str
  shared_update: str
  validation_weights: str
  gradient_sync_barrier: bool
  controller_on_host: bool
  compute_dtype: str
  compiled_by_model_fn: bool = False
  layout: Layout = Layout()

  def __post_init__(self):
    for name, choices in (('width_form', WIDTH_FORMS),
                          ('shared_update', SHARED_UPDATES),
                          ('validation_weights',
                           validation.VALIDATION_WEIGHTS),
                          ('compute_dtype', COMPUTE_DTYPES)):
      value = getattr(self, name)
      validation.check(value in choices, f'step plan: unknown {name} '
                       f'{value!r}; valid choices: {", ".join(choices)}')
    validation.check(not self.xla or (self.width_form == 'masked' and
                                      self.shared_update == EVERY_STEP),
                     'step plan: an XLA build has masked widths and '
                     f'every_step updates, not {self.width_form} widths and '
                     f'{self.shared_update} updates')
    validation.check(not (self.xla and self.controller_on_host),
                     'step plan: an XLA build compiles the controller with '
                     'the rest of the step, not on the host')
    validation.check(isinstance(self.layout, Layout),
                     f'step plan: a layout is use_tpu, num_replicas and '
                     f'multi_worker, not {self.layout!r}')
    validation.check(self.xla or not self.compiled_by_model_fn,
                     'step plan: only an XLA build is compiled by the '
                     'model_fn')

  @property
  def training_form(self) -> str:
    """The form of the training pass (`supernet.forms.named`): 'xla',
    'deferred' (dead gradients of unused weights) or 'every_step' (zero
    ones, TuNAS's); built at `width_form`."""
    if self.xla:
      return 'xla'
    return 'deferred' if self.shared_update == DEFERRED else 'every_step'

  @property
  def validation_form(self) -> str:
    """The form of the validation pass: 'xla' or 'validation' (no conds, no
    gradients); built at `width_form`."""
    return 'xla' if self.xla else 'validation'

  @property
  def validation_after_update(self) -> bool:
    """Whether the validation pass must wait for the weight update.

    `post_update` reads the weights after the update: with the barrier on,
    every op of the pass runs after it; the deferred update's catch-ups write
    weights too, so its post_update pass always waits.
    """
    return (self.validation_weights == 'post_update' and
            (self.gradient_sync_barrier or self.shared_update == DEFERRED))

  def describe(self) -> str:
    """The plan in one line, as the runner logs it."""
    controller = ('on the host' if self.controller_on_host
                  else 'placed by TensorFlow')
    return (f'step plan: {"XLA" if self.xla else "graph"} build, '
            f'{self.width_form} widths, {self.shared_update} RMSProp, '
            f'{self.validation_weights} validation, barrier '
            f'{"on" if self.gradient_sync_barrier else "off"}, controller '
            f'{controller}, {self.compute_dtype}')

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> 'StepPlan':
    """Parses `to_json()`'s output.

    Raises:
      ConfigError: for a file that is not such a plan.
    """
    try:
      values = json.loads(text)
      if isinstance(values, dict) and isinstance(values.get('layout'), dict):
        values['layout'] = Layout(**values['layout'])
      return cls(**values)
    except (ValueError, TypeError) as e:
      reason = str(e).splitlines()[0] if str(e) else type(e).__name__
      raise ConfigError(f'not a step plan ({reason})') from None


def _width_form(config: SearchConfig, xla: bool) -> str:
  if config.supernet_widths == 'auto':
    return 'masked' if xla else 'sampled'
  validation.check(not (xla and config.supernet_widths == 'sampled'),
                   'supernet_widths=sampled cannot run under XLA (it needs '
                   'static shapes); use masked or auto')
  return config.supernet_widths


def _shared_update(config: SearchConfig, xla: bool,
                   previous: Optional[StepPlan]) -> str:
  """`unused_weight_steps` resolved: a resumed run keeps its update.

  `auto` is the deferred update for a new run wherever it can run (one
  replica, the graph build, a positive RMSProp epsilon): the same values to
  float rounding, and a faster step (docs/benchmarks.md). Elsewhere it is
  TuNAS's every-step update (docs/DESIGN.md, "The step plan").
  """
  asked = config.unused_weight_steps
  if previous is not None:
    validation.check(
        asked in ('auto', previous.shared_update),
        f'model dir {config.model_dir} was written by an incompatible '
        f'config: unused_weight_steps (was {previous.shared_update!r}, now '
        f'{asked!r})')
    update = previous.shared_update
  elif asked == 'auto':
    can_defer = (not xla and validation.can_defer(config) and
                 config.model_rmsprop_epsilon > 0)
    update = DEFERRED if can_defer else EVERY_STEP
  else:
    update = asked
  if update == DEFERRED:
    validation.check(previous is None or not xla,
                     f'model dir {config.model_dir} holds a run whose unused '
                     'weights take deferred steps, which cannot run under '
                     'XLA; resume it with step_build=graph (or auto)')
    validation.check(not xla, 'unused_weight_steps=deferred cannot run under '
                     'XLA; use every_step or auto')
    # An idle weight's mean square is multiplied by decay**k at once when it
    # is next used, which underflows to 0 after a long idle span; a zero
    # gradient entry is then updated by 0 / sqrt(0 + epsilon)
    # (docs/method.md, "Deferred steps of unused weights").
    validation.check(config.model_rmsprop_epsilon > 0,
                     'unused_weight_steps=deferred needs '
                     'model_rmsprop_epsilon > 0, got '
                     f'{config.model_rmsprop_epsilon}; use every_step')
  return update


def resolve(config: SearchConfig, environment: Environment = Environment(),
            previous: Optional[StepPlan] = None) -> StepPlan:
  """The plan of `config`'s step on this machine.

  Args:
    config: the validated search config.
    environment: what the machine offers (the runner probes it).
    previous: the plan of the run the model dir holds (`previous`), or None
      for a new run: a resumed run keeps its shared-weight update, whose
      state its checkpoints hold.

  Raises:
    ConfigError: naming the value that cannot run here, in one line.
  """
  # `step_build=auto` is the graph off TPU: no GPU measurement has shown
  # the compiled step faster there yet (docs/benchmarks.md, "One GPU at
  # ImageNet scale"). A TPU always compiles.
  by_model_fn = (config.step_build == 'xla' and not config.use_tpu and
                 not environment.xla)
  xla = config.use_tpu or environment.xla or config.step_build == 'xla'
  # One compiled program runs on one device: nothing goes to the host.
  on_host = not xla and (config.controller_placement == 'host' or (
      config.controller_placement == 'auto' and environment.has_gpu and
      validation.one_local_replica(config)))
  validation.check(not (xla and config.controller_placement == 'host'),
                   'controller_placement=host cannot apply to an XLA build, '
                   'which compiles the whole step on one device; use auto or '
                   'default')
  return StepPlan(
      xla=xla, width_form=_width_form(config, xla),
      shared_update=_shared_update(config, xla, previous),
      validation_weights=config.validation_weights,
      gradient_sync_barrier=config.use_gradient_sync_barrier,
      controller_on_host=on_host,
      # The same on every device: `use_bfloat16` as asked, its `auto` being
      # the space's TuNAS default (bin/search.py). Whether a GPU should
      # compute in bfloat16 whatever the space is what
      # tools/gpu_offline/checks.sh's throughput check measures; until a GPU
      # has, it keeps this default.
      compute_dtype='bfloat16' if config.use_bfloat16 else 'float32',
      compiled_by_model_fn=by_model_fn,
      layout=Layout(use_tpu=config.use_tpu, num_replicas=config.num_replicas,
                    multi_worker=config.multi_worker))


def previous(model_dir: str, environment: Environment = Environment()
             ) -> Optional[StepPlan]:
  """The plan of the run `model_dir` holds; None for a new model dir.

  Its `step_plan.json`, or for a model dir written before plans existed the
  plan its config.json gives, whose `unused_weight_steps` was recorded as
  resolved (absent: every weight was stepped every step).

  Raises:
    ConfigError: if a config.json or step_plan.json there cannot be read.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  plan_path = os.path.join(model_dir, PLAN_FILENAME)
  if tf.io.gfile.exists(plan_path):
    try:
      return StepPlan.from_json(persistence.read_text(plan_path))
    except ConfigError as e:
      raise ConfigError(f'{plan_path} cannot be used: {e}; restore it or '
                        'use another --model_dir') from None
  config_path = os.path.join(model_dir, persistence.CONFIG_FILENAME)
  if not tf.io.gfile.exists(config_path):
    return None
  old = persistence.load_existing(SearchConfig, config_path)
  if old.unused_weight_steps == 'auto':  # Its plan file was never written.
    return None
  return resolve(old, environment)


def write(plan: StepPlan, model_dir: str) -> None:
  """Writes (or rewrites) `plan` as the model dir's step_plan.json."""
  persistence.write_atomically(os.path.join(model_dir, PLAN_FILENAME),
                               plan.to_json())

