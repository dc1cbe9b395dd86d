"""Retargeting a finished search: fresh controllers on its fixed weights.

A search spends most of its cost training the shared weights. A retarget
restores them from a finished search (caught up, as `init_from_search` reads
them), keeps them fixed (they are not even trainable variables of the graph)
and trains a fresh controller per cost target with the search's REINFORCE,
reward and EMA baseline (docs/method.md section 5). A step is the validation
pass of each controller's sampled architecture, then each controller's
update: no training pass, no shared-weight update, and the training split is
not read (docs/retarget.md, "Cost").

The first target's controller lives in the search's own scope
(`rlcontroller`), so a retarget's model dir is read as a search by
`analyze_search`, `evaluate_search` and the one-shot scorer; target k > 0
lives under `retarget_<k>/rlcontroller` and logs under `retarget_<k>/`.
Every controller samples from the same stateless seed, so controllers whose
logits agree draw the same architecture (common random numbers).
"""

import dataclasses
import json
import os
import random
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from tunas_search import config as config_lib
from tunas_search.config import SearchConfig
from tunas_search.config import persistence
from tunas_search.config.plan import StepPlan
from tunas_search.controller import policy as controller
from tunas_search.results import analysis
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.runtime import placement
from tunas_search.search import model_fn as search
from tunas_search.search import nonfinite
from tunas_search.search import step as step_lib
from tunas_search.space import schema
from tunas_search.standalone import warm_start

tf1 = tf.compat.v1

RETARGET_FILENAME = 'retarget.json'
RESULT_FILENAME = 'search_result.json'
# Graph collection of a retarget's step: each target's validation accuracy,
# in order (`StepRecorder`).
ACCURACIES = 'retarget_validation_accuracies'
# Fields of the source's config that a retarget resets: the warm-ups and
# the RL delay exist because a search's weights start untrained; a
# retarget's are trained, so its controller learns from the first step.
# Weights are never stepped, so no deferred state is kept. The validation
# batch is one training batch, not the search's 4: the validation pass is
# all a retarget step computes, and at the search's batch it alone costs
# more than half a search step (docs/retarget.md, "Cost"); a controller
# step at one batch costs a fifth. `--rl_batch_size_multiplier` sets it.
RETARGET_DEFAULTS = {
    'rl_batch_size_multiplier': 1.0,
    'rl_delay_steps_fraction': 0.0,
    'increase_ops_warmup_steps_fraction': 0.0,
    'increase_filters_warmup_steps_fraction': 0.0,
    'unused_weight_steps': 'every_step',
}


class Source(NamedTuple):
  """A finished search to retarget.

  Attributes:
    model_dir: its model dir (only ever read).
    config: its config.
    spec: its model spec.
    checkpoint: its final checkpoint.
  """
  model_dir: str
  config: SearchConfig
  spec: Any
  checkpoint: str


def read_source(source_dir: str) -> Source:
  """Checks that `source_dir` holds a finished search; reads nothing else.

  Raises:
    ConfigError: one line naming the dir and what is wrong: not a search
      dir, no final checkpoint or no search_result.json (unfinished).
  """
  where = f'--retarget_from={source_dir}'
  try:
    config, spec = analysis.load_search(source_dir)
  except analysis.AnalysisError as e:
    raise config_lib.ConfigError(f'{where}: {e}') from None
  checkpoint = tf.train.latest_checkpoint(source_dir)
  step = _step_of(checkpoint) if checkpoint else 0
  has_result = tf.io.gfile.exists(os.path.join(source_dir, RESULT_FILENAME))
  if step != config.total_steps or not has_result:
    raise config_lib.ConfigError(
        f'{where} is an unfinished search (checkpoint at step {step} of '
        f'{config.total_steps}, {RESULT_FILENAME} '
        f'{"present" if has_result else "missing"}); finish it by rerunning '
        'its command, or retarget a finished search')
  return Source(source_dir, config, spec, checkpoint)


def _step_of(checkpoint: str) -> int:
  try:
    return int(checkpoint.rsplit('-', 1)[1])
  except (IndexError, ValueError):
    return 0


def make_config(source: Source, model_dir: str, targets: Sequence[float],
                **overrides: Any) -> SearchConfig:
  """The retarget's config: the source's, at the first target.

  Args:
    source: the finished search.
    model_dir: the retarget's own model dir (never the source's).
    targets: the cost targets, one controller each (at least one).
    **overrides: other fields to change (cost model, reward, steps, ...);
      they override `RETARGET_DEFAULTS` too.

  Raises:
    ConfigError: for no target, the source's own dir, or an invalid value.
  """
  if not targets:
    raise config_lib.ConfigError('a retarget needs at least one cost target')
  if os.path.abspath(model_dir) == os.path.abspath(source.model_dir):
    raise config_lib.ConfigError(
        f'--model_dir={model_dir} is the source search; a retarget writes '
        'to a new model dir')
  values = dict(RETARGET_DEFAULTS, **overrides)
  values.update(model_dir=model_dir, rl_cost_model_target=float(targets[0]))
  if values.get('cost_model', source.config.cost_model) == 'none':
    raise config_lib.ConfigError(
        '--cost_model=none: a retarget needs a cost model and a target')
  return dataclasses.replace(source.config, **values)


def controller_scope(k: int) -> str:
  """Variable scope holding target k's controller (logits, baseline, Adam)."""
  return '' if k == 0 else f'retarget_{k}'


def _controller_scope(k: int):
  return tf1.variable_scope(controller_scope(k) or tf1.get_variable_scope())


def summary_prefix(k: int) -> str:
  return '' if k == 0 else f'retarget_{k}/'


def _read_retarget(model_dir: str) -> Optional[Dict[str, Any]]:
  path = os.path.join(model_dir, RETARGET_FILENAME)
  if not tf.io.gfile.exists(path):
    return None
  return json.loads(persistence.read_text(path))


def targets_of(model_dir: str) -> List[float]:
  """A retarget's cost targets, in order; [] for a search's model dir."""
  record = _read_retarget(model_dir)
  return [float(t) for t in record['targets']] if record else []


def _record(source: Source, targets: Sequence[float]) -> Dict[str, Any]:
  return {'source_dir': os.path.abspath(source.model_dir),
          'source_checkpoint': os.path.basename(source.checkpoint),
          'targets': [float(t) for t in targets]}


def check_resume(model_dir: str, source: Source,
                 targets: Sequence[float]) -> None:
  """Refuses a model dir holding another run than this retarget.

  Raises:
    ConfigError: if it holds a search (config.json, no retarget.json) or a
      retarget of another source or other targets.
  """
  old = _read_retarget(model_dir)
  has_config = tf.io.gfile.exists(
      os.path.join(model_dir, config_lib.CONFIG_FILENAME))
  if old is None and has_config:
    raise config_lib.ConfigError(
        f'--model_dir={model_dir} holds a search, not a retarget; use a new '
        '--model_dir')
  if old is not None and old != _record(source, targets):
    raise config_lib.ConfigError(
        f'--model_dir={model_dir} holds a retarget of {old["source_dir"]} to '
        f'{old["targets"]}; rerun it with those, or use a new --model_dir')


def _source_weights(source: Source, variables: Sequence[tf.Variable]):
  """(variable, value) pairs of the source's caught-up shared weights."""
  weights = warm_start.SearchWeights.open(
      source.model_dir, source.spec, source.config.num_classes,
      source.config.input_channels)
  return weights.assignments(variables)


def _freeze(variables: Sequence[tf.Variable]) -> None:
  """Takes `variables` out of the graph's trainable set."""
  frozen = {id(v) for v in variables}
  trainable = tf1.get_collection_ref(tf1.GraphKeys.TRAINABLE_VARIABLES)
  trainable[:] = [v for v in trainable if id(v) not in frozen]


def _accuracies(config: SearchConfig, plan: StepPlan,
                masked_specs: List[Any], images: tf.Tensor,
                labels: tf.Tensor) -> List[tf.Tensor]:
  """Top-1 accuracy of each sampled architecture on the batch: the
  search's own validation pass (`step.validation_logits`), one per target.
  (Computing the layers that targets agree on once saved 1.5% of a
  default-length run, under the 3% a speed trick needs; docs/retarget.md.)
  """
  accuracies = []
  for masked_spec in masked_specs:
    logits = step_lib.validation_logits(config, plan, masked_spec, images)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32),
                       labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    if config.constant_validation_accuracy is not None:
      accuracy = tf.constant(config.constant_validation_accuracy, tf.float32)
    accuracies.append(accuracy)
  return accuracies


def make_model_fn_builder(source: Source, targets: Sequence[float]
                          ) -> Callable:
  """A `runner.run_search` model_fn builder for this retarget.

  Called once the model dir is checked and locked; it then records
  retarget.json (source and targets), which a resume checks.
  """
  def build(config: SearchConfig, plan: StepPlan, model_spec: Any,
            write_summaries: bool = True):
    path = os.path.join(config.model_dir, RETARGET_FILENAME)
    if write_summaries and not tf.io.gfile.exists(path):
      model_dir_lib.write_text(path, json.dumps(_record(source, targets),
                                                indent=2))
    return make_model_fn(config, plan, model_spec, source, targets,
                         write_summaries)
  return build


def make_model_fn(config: SearchConfig, plan: StepPlan, model_spec: Any,
                  source: Source, targets: Sequence[float],
                  write_summaries: bool = True):
  """The TPUEstimator model_fn of a retarget (TRAIN mode only).

  Args:
    config: the retarget's config (`make_config`).
    plan: its step plan; only the validation pass's form is used.
    model_spec: the searched spec (the source's).
    source: the finished search whose weights score the architectures.
    targets: one cost target per controller; `config`'s is the first.
    write_summaries: False on non-chief workers.
  """
  decisions = schema.decisions(model_spec)
  devices = placement.StepDevices(plan)
  seed_base = (config.seed if config.seed is not None
               else random.SystemRandom().randrange(2**31))

  def model_fn(features, labels, mode, params):
    del params
    if mode != tf.estimator.ModeKeys.TRAIN:
      raise ValueError(f'a retarget only trains; got mode {mode!r}')
    return step_fn(features, labels, mode)

  # As the search's: the estimator needs model_fn's own signature, so the
  # body is what opts out of AutoGraph.
  @tf.autograph.experimental.do_not_convert
  def step_fn(features, labels, mode):
    global_step = tf1.train.get_or_create_global_step()
    batch = search.unpack_batch(features, labels, plan.layout)
    with placement.host_scope(plan.controller_on_host):
      step = global_step.read_value()
    scalars, train_ops, losses = {}, [], []
    target_configs = [
        dataclasses.replace(config, rl_cost_model_target=float(t))
        for t in targets]
    # 1. Each controller samples (the same seed for every controller).
    archs = []
    for k, target_config in enumerate(target_configs):
      with _controller_scope(k), placement.host_scope(
          plan.controller_on_host):
        archs.append(step_lib.sample_architecture(
            target_config, decisions, model_spec, step,
            step_lib.sampling_seed(seed_base, step, devices)))
    # 2. Only the validation passes, on the fixed shared weights (built
    # outside the controllers' scopes: every controller reads the same).
    before = set(tf1.global_variables())
    accuracies = _accuracies(
        config, plan, [a.masked_spec for a in archs],
        batch.validation_images, batch.validation_labels)
    shared = [v for v in tf1.global_variables() if v not in before]
    _freeze(shared)
    for accuracy in accuracies:
      tf1.add_to_collection(ACCURACIES, accuracy)
    # 3. Reward, baseline and each controller's REINFORCE step; the first
    # controller's step increments the global step.
    for k, (target_config, arch, accuracy) in enumerate(
        zip(target_configs, archs, accuracies)):
      with _controller_scope(k), placement.host_scope(
          plan.controller_on_host):
        reward = step_lib.reward(target_config, arch.masked_spec, accuracy)
        rl = step_lib.update_controller(
            target_config, arch.sample, list(arch.logit_variables.values()),
            reward['reward'], step, global_step if k == 0 else None,
            devices.mean)
        scalars.update(
            (summary_prefix(k) + name, value)
            for name, value in search.controller_scalars(
                target_config, decisions, arch, accuracy, reward,
                rl).items())
      train_ops.append(rl['train_op'])
      losses.append(rl['loss'])
    with placement.host_scope(plan.controller_on_host):
      host_call = (search.summary_host_call(config, scalars, step)
                   if write_summaries else None)
    # The first controller's op increments the global step; the others run
    # before it, so a step's checkpoint holds every controller's update.
    with tf.control_dependencies(train_ops[1:]):
      train_op = tf.group(train_ops[0])
    return tf1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=nonfinite.nan_unless_finite(*losses),
        train_op=train_op, host_call=host_call,
        scaffold_fn=_scaffold_fn(config, plan, source, shared))

  return model_fn


def _scaffold_fn(config: SearchConfig, plan: StepPlan, source: Source,
                 shared: Sequence[tf.Variable]) -> Callable:
  """Loads the source's weights into a fresh session (not on a resume:
  the retarget's own checkpoints hold them, and the source is not read)."""
  resuming = tf.train.latest_checkpoint(config.model_dir) is not None
  pairs = [] if resuming else _source_weights(source, shared)
  init_fn = warm_start.scaffold_init_fn(pairs)
  default = search.scaffold_fn(plan.layout)
  def scaffold_fn():
    if default is None:
      return tf1.train.Scaffold(init_fn=init_fn)
    base = default()
    return tf1.train.Scaffold(ready_op=base.ready_op,
                              ready_for_local_init_op=base.ready_for_local_init_op,
                              init_fn=init_fn)
  return scaffold_fn


class StepRecorder(tf1.train.SessionRunHook):
  """Records every step's per-target validation accuracies.

  For watching a retarget step by step off TPU, where a session run is one
  step (`run_retarget(..., hooks=[recorder])`).

  Attributes:
    accuracies: one list per step, one value per target.
  """

  def __init__(self):
    self.accuracies = []

  def begin(self):
    self._fetches = tf1.get_collection(ACCURACIES)

  def before_run(self, run_context):
    return tf1.train.SessionRunArgs(self._fetches)

  def after_run(self, run_context, run_values):
    self.accuracies.append([float(a) for a in run_values.results])


def final_logits(model_dir: str, decisions: Sequence[schema.Decision],
                 k: int, checkpoint: Optional[str] = None
                 ) -> List[np.ndarray]:
  """Target k's controller logits in the model dir's latest checkpoint."""
  scope = '/'.join(p for p in (controller_scope(k), controller.DEFAULT_SCOPE)
                   if p)
  return controller.read_logit_values(
      checkpoint or tf.train.latest_checkpoint(model_dir), decisions, scope)


def run_retarget(config: SearchConfig, source: Source,
                 targets: Sequence[float], hooks=None, input_fn=None
                 ) -> analysis.Analysis:
  """Runs (or resumes) a retarget to `config.total_steps`.

  Writes what a search writes (config.json, model_spec.json, step_plan.json,
  checkpoints, events, search_result.json at the first target) plus
  retarget.json; the source dir is only read.

  Raises:
    ConfigError: for a model dir holding another run, or what
      `runner.run_search` raises.
  """
  from tunas_search.search import runner  # pylint: disable=g-import-not-at-top
  check_resume(config.model_dir, source, targets)
  # No training pass: the training split is not even read.
  input_fn = input_fn or runner.search_input_fn(config, training_stream=False)
  return runner.run_search(config, source.spec, hooks=hooks,
                           input_fn=input_fn,
                           make_model_fn=make_model_fn_builder(source,
                                                               targets))
