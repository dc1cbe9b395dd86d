"""The search model_fn: the TuNAS step (`step.search_step`) and what running
it needs.

The method is `search/step.py`, one function per part of the paper's step.
Everything here is about running it, not the method: the mode, XLA
compilation off TPU, the input's device layout, where the parts run
(`placement.StepDevices`, from the plan), graph collections for hooks, the
summaries and their host_call (every scalar, controller logit and choice
probability, logged under the step number after the step), the NaN guard
and the scaffold.
"""

import random
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import tensorflow as tf

from tunas_search.controller import policy as controller
from tunas_search import cost_models
from tunas_search.search import nonfinite
from tunas_search.search import step as step_lib
from tunas_search.space import schema
from tunas_search.results import summaries
from tunas_search.config import SearchConfig
from tunas_search.config.plan import Layout
from tunas_search.config.plan import StepPlan
from tunas_search.data import untranspose_images
from tunas_search.runtime import host_call as host_call_lib
from tunas_search.runtime import placement
from tunas_search.runtime import xla

tf1 = tf.compat.v1
# The method's names, for the callers that knew them here (evaluation's
# one-shot score, tests, bench/).
CONTROLLER_SCOPE = step_lib.CONTROLLER_SCOPE
Batch = step_lib.Batch
Training = step_lib.Training
Validate = step_lib.Validate
model_variables = step_lib.model_variables
search_step = step_lib.search_step
validate = step_lib.validate
validation_logits = step_lib.validation_logits
# Graph collections of per-replica tensors (one entry per replica off TPU),
# for session hooks that watch what each replica sampled and earned.
SAMPLED_INDICES = 'tunas_search/sampled_indices'
REPLICA_REWARD = 'tunas_search/replica_reward'
STEP_BASELINE = 'tunas_search/step_baseline'


# Summaries: what a step logs. ------------------------------------------------


def logit_summaries(decisions: List[schema.Decision],
                    logits: Union[Sequence[tf.Tensor], Mapping[int, tf.Tensor]]
                    ) -> Dict[str, tf.Tensor]:
  """The controller's logits and choice probabilities as scalar summaries.

  `rlpathlogits/<path>/<j>` and `rltaglogits/<tag>_indices_<k>/<j>` (TuNAS's
  tag names) for every decision, and `rlprobs/<path>/<choice name>` (the
  softmax of the logits, as `analyze_search` reports them) for every decision
  with more than one choice (`summaries.prob_tags`), each a float32 scalar.

  Args:
    decisions: `schema.decisions(spec)`.
    logits: one float32 [num_choices] tensor per decision, or the grouped
      {n: [m, n]} values that `controller.create_logits` holds.
  """
  out = {}
  if isinstance(logits, Mapping):
    groups = logits
    single = [tf.zeros([1])] * len(decisions)  # Held in no variable.
  else:
    groups = controller.grouped_tensors(decisions, logits)
    single = logits
  for i, d in enumerate(decisions):
    if d.num_choices == 1:
      logit = tf.reshape(single[i], [])
      out[controller.path_logit_tag(d, 0)] = logit
      out[controller.tag_logit_tag(d, 0)] = logit
  # One softmax per number of choices (charted: more than one choice).
  for n, rows in controller.rows_by_size(decisions).items():
    values = tf.convert_to_tensor(groups[n])
    if values.shape != (len(rows), n):
      raise ValueError(f'logits for {n} choices have shape {values.shape}; '
                       f'expected [{len(rows)}, {n}]')
    flat = tf.unstack(tf.reshape(values, [-1]))
    probs = tf.unstack(tf.reshape(tf.nn.softmax(values), [-1]))
    for k, i in enumerate(rows):
      d = decisions[i]
      for j in range(n):
        out[controller.path_logit_tag(d, j)] = flat[k * n + j]
        out[controller.tag_logit_tag(d, j)] = flat[k * n + j]
      out.update({tag: probs[k * n + j]
                  for j, tag in enumerate(summaries.prob_tags(d))})
  return out


def _summary_scalars(config: SearchConfig, decisions, built: step_lib.Step,
                     model_loss: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Every scalar a step logs, with the logits read after its update.

  `model_loss`: the shared weights' loss as reported (NaN when its step was
  not finite).
  """
  training = built.training
  scalars = {'model/loss': model_loss,
             'model/empirical_loss': training.empirical_loss,
             'model/regularization_loss': training.regularization_loss,
             'model/learning_rate': training.learning_rate}
  scalars.update(controller_scalars(config, decisions, built.architecture,
                                    built.accuracy, built.reward,
                                    built.controller))
  return scalars


def controller_scalars(config: SearchConfig, decisions,
                       arch: step_lib.Architecture, accuracy: tf.Tensor,
                       reward: Dict[str, tf.Tensor],
                       rl: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The controller's scalars of a step: reward, accuracy, cost, logits.

  The logits are read after the controller's update: the values logged at
  step n are the ones the checkpoint of step n holds.
  """
  scalars = {f'{CONTROLLER_SCOPE}/{k}': v for k, v in rl.items()
             if k != 'train_op'}
  scalars.update({f'{CONTROLLER_SCOPE}/{k}': v for k, v in reward.items()})
  scalars[f'{CONTROLLER_SCOPE}/validation_accuracy'] = accuracy
  scalars[f'{CONTROLLER_SCOPE}/increase_ops_prob'] = arch.increase_ops_prob
  scalars[f'{CONTROLLER_SCOPE}/increase_filters_prob'] = (
      arch.increase_filters_prob)
  if config.cost_model != cost_models.NONE:
    scalars[summaries.COST_TARGET_TAG] = tf.constant(
        config.rl_cost_model_target, tf.float32)
  with tf.control_dependencies([rl['train_op']]):
    updated = {n: v.read_value()
               for n, v in arch.logit_variables.items()}
  scalars.update(logit_summaries(decisions, updated))
  return scalars


def _host_call(config: SearchConfig, scalars: Dict[str, Any],
               step: tf.Tensor):
  """The host_call writing `scalars` under the step number after this step.

  That is the global step the controller's update leaves, which names the
  checkpoint written after it; at every host loop, every checkpoint and the
  last step.
  """
  names, packed = host_call_lib.pack_summaries(scalars)
  return host_call_lib.make_host_call(
      config.model_dir, names, packed, step + 1,
      [config.tpu_iterations_per_loop, config.iterations_per_checkpoint],
      final_step=config.total_steps)


# The runtime around the method. ---------------------------------------------


def _unpack(features, labels, layout: Layout) -> step_lib.Batch:
  """The step's batch; undoes the host-side HWCN transpose (TPU only).

  Images stay float32 here; the builder casts them when computing in
  bfloat16.
  """
  images = [features['train_images'], features['validation_images']]
  if layout.use_tpu:
    images = [untranspose_images(x) for x in images]
  return step_lib.Batch(images[0], tf.cast(labels['train_labels'], tf.int32),
               images[1], tf.cast(labels['validation_labels'], tf.int32))


def constant_accuracy(value: float) -> Validate:
  """A step 3 that builds the validation pass but reports `value`.

  The test seam behind `constant_validation_accuracy`: the reward sees a
  fixed accuracy, so a test can tell the controller's update from noise.
  """
  def validate_constant(config, plan, masked_spec, batch, training):
    step_lib.validate(config, plan, masked_spec, batch, training)
    return tf.constant(value, tf.float32)
  return validate_constant


def make_model_fn(config: SearchConfig, plan: StepPlan, model_spec: Any,
                  write_summaries: bool = True,
                  validate_fn: Optional[Validate] = None):
  """Returns the TPUEstimator model_fn of a search (TRAIN mode only).

  The method is `step.search_step`; this wraps it in what running it
  needs.

  Args:
    config: the validated search config.
    plan: the step's form and layout (`config.plan.resolve`).
    model_spec: the search space's spec (no masks).
    write_summaries: False on the non-chief workers of a multi-worker
      search, so that only the chief writes events.
    validate_fn: step 3, for tests; default `validate`, or
      `constant_accuracy` when `config.constant_validation_accuracy` is
      set (a testing aid of the command line).
  """
  decisions = schema.decisions(model_spec)
  # Without --seed each run samples its own stream; with it, every run the
  # same one.
  seed_base = (config.seed if config.seed is not None
               else random.SystemRandom().randrange(2**31))
  if validate_fn is None:
    validate_fn = (step_lib.validate
                   if config.constant_validation_accuracy is None
                   else constant_accuracy(config.constant_validation_accuracy))
  devices = placement.StepDevices(plan)

  def model_fn(features, labels, mode, params):
    del params  # Batch sizes are already in the input pipeline's tensors.
    if mode != tf.estimator.ModeKeys.TRAIN:
      raise ValueError(f'a search only trains; got mode {mode!r}')
    if plan.compiled_by_model_fn:  # step_build=xla off TPU.
      return xla.compiled_spec(
          step_fn, features, labels, mode,
          collections=(SAMPLED_INDICES, REPLICA_REWARD, STEP_BASELINE))
    return step_fn(features, labels, mode)

  # A MirroredStrategy runs the model_fn through AutoGraph, which would
  # rewrite this plain graph code (slowly); the estimator needs model_fn's
  # own signature, so the body is what opts out.
  @tf.autograph.experimental.do_not_convert
  def step_fn(features, labels, mode):
    global_step = tf1.train.get_or_create_global_step()
    built = step_lib.search_step(
        config, plan, decisions, model_spec,
        _unpack(features, labels, plan.layout), global_step, seed_base,
        devices, validate_fn)
    training, rl = built.training, built.controller
    # A step with non-finite gradients reports a NaN loss, so the run stops.
    model_loss = tf.where(training.finite, training.loss,
                          tf.constant(float('nan'), training.loss.dtype))
    with devices.host():
      for key, value in ((SAMPLED_INDICES, built.architecture.sample.indices),
                         (REPLICA_REWARD, built.reward['reward']),
                         (STEP_BASELINE, rl['step_baseline'])):
        tf1.add_to_collection(key, value)
      scalars = _summary_scalars(config, decisions, built, model_loss)
      host_call = (_host_call(config, scalars, built.step) if write_summaries
                   else None)
    return tf1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=nonfinite.nan_unless_finite(model_loss, rl['loss']),
        train_op=tf.group(training.train_op, rl['train_op']),
        host_call=host_call, scaffold_fn=_scaffold_fn(plan.layout))

  return model_fn


def _scaffold_fn(layout: Layout) -> Optional[Callable]:
  """A scaffold without the readiness checks, for a one-process search.

  The default scaffold's two checks list the uninitialised variables (every
  weight and optimiser slot, thousands in a full space) before the first
  step, which costs start-up time (bench/startup.py). They exist for
  processes that wait on a chief; with one process, restoring a checkpoint
  already fails on a missing variable and a fresh start initialises all of
  them. TPU and several-replica searches keep them.
  """
  if not layout.one_process:
    return None
  nothing_missing = lambda: tf.constant([], tf.string)
  return lambda: tf1.train.Scaffold(
      ready_op=nothing_missing(),
      ready_for_local_init_op=nothing_missing())


# Public names of runtime pieces that a retarget's step reuses
# (search/retarget.py: a fixed-weight controller run). Aliases only.
unpack_batch = _unpack
summary_host_call = _host_call
scaffold_fn = _scaffold_fn
