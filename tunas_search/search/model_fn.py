"""The search model_fn: one TuNAS step, read top to bottom like the paper.

Each step (Bender et al. 2020, section 3; docs/method.md):
  1. the controller samples an architecture (one mask per decision),
  2. the shared weights take one RMSProp step on a training batch through
     that architecture, decayed only where the architecture uses them
     (`shared_update`: TuNAS's every-step RMSProp or the deferred form),
  3. the same architecture is scored on a held-out validation batch, with
     the weights read before this step's update (`pre_update`, as the
     released TuNAS) or after it (`post_update`),
  4. accuracy and the estimated cost become a reward; the cross-replica mean
     reward feeds an EMA baseline,
  5. the controller takes one REINFORCE step with TuNAS's cross-replica Adam,
     which increments the global step.
Every scalar, every controller logit and every choice probability goes to
TensorBoard via host_call, logged under the step number after the step.
The step's form (XLA or graph build, widths, update, validation weights,
barrier, controller placement, dtype) is the `StepPlan`'s, decided once at
start (config/plan.py); nothing here looks at devices.
"""

import contextlib
import random
from typing import (Any, Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Union)

import tensorflow as tf

from tunas_search.controller import policy as controller
from tunas_search.controller import adam as controller_adam
from tunas_search import cost_models
from tunas_search.search import nonfinite
from tunas_search.search import rewards
from tunas_search.search import schedules
from tunas_search.space import schema
from tunas_search.search import shared_update
from tunas_search.results import summaries
from tunas_search import supernet
from tunas_search.config import SearchConfig
from tunas_search.config.plan import StepPlan
from tunas_search.data import untranspose_images
from tunas_search.runtime import host_call as host_call_lib
from tunas_search.runtime import placement
from tunas_search.runtime import replicas
from tunas_search.runtime import xla
from tunas_search.supernet import forms

tf1 = tf.compat.v1
# Variable scope of the controller's logits, baseline and Adam slots.
CONTROLLER_SCOPE = controller.DEFAULT_SCOPE
# Graph collections of per-replica tensors (one entry per replica off TPU),
# for session hooks that watch what each replica sampled and earned.
SAMPLED_INDICES = 'tunas_search/sampled_indices'
REPLICA_REWARD = 'tunas_search/replica_reward'
STEP_BASELINE = 'tunas_search/step_baseline'


class _Batch(NamedTuple):
  train_images: tf.Tensor
  train_labels: tf.Tensor
  validation_images: tf.Tensor
  validation_labels: tf.Tensor


def _unpack(features, labels, config: SearchConfig) -> _Batch:
  """Undoes the host-side HWCN transpose (TPU only).

  Images stay float32 here; the builder casts them when computing in
  bfloat16.
  """
  images = [features['train_images'], features['validation_images']]
  if config.use_tpu:
    images = [untranspose_images(x) for x in images]
  return _Batch(images[0], tf.cast(labels['train_labels'], tf.int32),
                images[1], tf.cast(labels['validation_labels'], tf.int32))


def _sampling_seed(config: SearchConfig, base: int,
                   step: tf.Tensor) -> tf.Tensor:
  """The controller's stateless seed for this step on this replica.

  (seed, step, replica): a search samples the same architectures whether or
  not XLA compiles the step (XLA ignores the seeds of stateful random ops,
  and its stateless ones draw other numbers than the CPU's), and after a
  resume; the replica id gives every replica its own architecture
  (docs/method.md section 5, `controller.counter_uniform`).

  Args:
    config: the search config (replica layout).
    base: `config.seed`, or a number drawn once per process without one.
    step: the global step read at the start of the step.
  """
  replica = replicas.replica_id(config.use_tpu, config.num_replicas)
  return tf.stack([tf.constant(base, tf.int64), tf.cast(step, tf.int64),
                   replica])


class _Architecture(NamedTuple):
  """Step 1's outputs: the sampled architecture and what produced it."""
  logit_variables: Dict[int, tf.Variable]
  sample: controller.ControllerSample
  masked_spec: Any
  increase_ops_prob: tf.Tensor
  increase_filters_prob: tf.Tensor


def _sample_architecture(config: SearchConfig, decisions, model_spec: Any,
                         step: tf.Tensor, seed_base: int) -> _Architecture:
  """The controller's architecture for this step, with the warm-ups."""
  variables = controller.create_logits(decisions, scope=CONTROLLER_SCOPE)
  logits = controller.decision_logits(decisions, variables)
  p_ops = schedules.linear_decay_prob(step, config.fraction_steps(
      config.increase_ops_warmup_steps_fraction))
  p_filters = schedules.linear_decay_prob(step, config.fraction_steps(
      config.increase_filters_warmup_steps_fraction))
  sample = controller.sample(
      decisions, logits, increase_ops_prob=p_ops,
      increase_filters_prob=p_filters, temperature=config.rl_temperature,
      stateless_seed=_sampling_seed(config, seed_base, step))
  masked_spec = schema.with_masks(
      model_spec, [tf.stop_gradient(m) for m in sample.masks])
  return _Architecture(variables, sample, masked_spec, p_ops, p_filters)


def _network(config: SearchConfig, plan: StepPlan, form: forms.Form,
             masked_spec: Any, images: tf.Tensor,
             snapshots: Optional[Dict[str, tf.Tensor]],
             decay: Optional[supernet.MaskedWeightDecay] = None,
             uses: Optional[supernet.WeightUses] = None):
  """The weight-shared network with batch-statistics BN (docs/method.md).

  With `snapshots`, every shared weight is read once per step into it and
  both passes compute with those reads.
  """
  with contextlib.ExitStack() as stack:
    if snapshots is not None:
      stack.enter_context(supernet.reading_snapshots(snapshots))
    return supernet.build_network(
        masked_spec, images, config.num_classes, form,
        dtype=tf.as_dtype(plan.compute_dtype), decay=decay, uses=uses)


def _model_variables() -> List[tf.Variable]:
  return [v for v in tf1.trainable_variables()
          if not v.name.startswith(CONTROLLER_SCOPE + '/')]


def _after(grads_and_vars, deps: List[tf.Tensor]):
  """The gradients, available only once every tensor in `deps` is.

  With all gradients in `deps` this is the gradient-sync barrier: no weight
  is updated before every gradient exists. With the weight snapshots in
  `deps`, no weight is updated before every snapshot has been read.
  """
  if not deps:
    return grads_and_vars
  # One NoOp gathers the dependencies and every gradient waits on it: the
  # same order with len(deps) + len(grads) control edges instead of their
  # product, which slowed graph building and Grappler by tens of seconds.
  with tf.control_dependencies(deps):
    barrier = tf.no_op(name='gradient_sync_barrier')
  with tf.control_dependencies([barrier]):
    return [(None if g is None else tf.identity(g), v)
            for g, v in grads_and_vars]


def _shared_weight_step(config: SearchConfig, plan: StepPlan,
                        masked_spec: Any, batch: _Batch, step: tf.Tensor,
                        snapshots: Optional[Dict[str, tf.Tensor]]
                        ) -> Dict[str, tf.Tensor]:
  """Trains the shared weights on the training batch; returns its tensors.

  `snapshots`: the validation pass's weight reads (pre_update), which no
  update may precede, or None.
  """
  update = shared_update.for_plan(config, plan)
  decay = supernet.MaskedWeightDecay()
  logits = _network(config, plan, update.form, masked_spec,
                    batch.train_images, update.training_snapshots(snapshots),
                    decay, update.uses)
  one_hot = tf.one_hot(batch.train_labels, config.num_classes)
  empirical_loss = tf1.losses.softmax_cross_entropy(
      one_hot, logits, label_smoothing=config.label_smoothing)
  # Only what the sampled architecture uses is decayed (docs/method.md).
  regularization_loss = update.decay_loss(decay, config.weight_decay)
  loss = empirical_loss + regularization_loss
  with placement.host_scope(plan.controller_on_host):
    learning_rate = schedules.cosine_with_warmup(
        step, config.scaled_model_learning_rate, config.total_steps,
        config.fraction_steps(config.model_warmup_steps_fraction))
  grads_and_vars = update.gradients(loss, _model_variables(), step,
                                    learning_rate)
  finite, grads_and_vars = update.check_finite(empirical_loss,
                                               grads_and_vars)
  deps = list(snapshots.values()) if snapshots else []
  if plan.gradient_sync_barrier:
    deps += update.sync_tensors(grads_and_vars)
  train_op = update.apply(_after(grads_and_vars, deps), finite)
  # A step with non-finite gradients reports a NaN loss, so the run stops.
  loss = tf.where(finite, loss, tf.constant(float('nan'), loss.dtype))
  return {'train_op': train_op, 'loss': loss, 'empirical_loss': empirical_loss,
          'regularization_loss': regularization_loss,
          'learning_rate': learning_rate}


def validation_logits(config: SearchConfig, plan: StepPlan,
                      masked_spec: Any, images: tf.Tensor,
                      snapshots: Optional[Dict[str, tf.Tensor]] = None
                      ) -> tf.Tensor:
  """The supernet's validation pass: the network the reward scores.

  The shared weights under `masked_spec`'s masks with batch-statistics BN
  (docs/method.md sections 4-5), built in the plan's form. A one-shot score
  (evaluation/one_shot.py) builds its network here too, so that it is the
  search's own.

  Args:
    config: the search's config.
    plan: its step plan (form, widths, compute dtype).
    masked_spec: the model spec with a tensor mask on every decision.
    images: float32 [N, H, W, C].
    snapshots: the step's weight reads (pre_update validation), or None to
      read the variables.

  Returns:
    float32 logits [N, num_classes].
  """
  form = forms.xla() if plan.xla else forms.validation(plan.width_form)
  return _network(config, plan, form, masked_spec, images, snapshots)


def _validation_accuracy(config: SearchConfig, plan: StepPlan,
                         masked_spec: Any, batch: _Batch,
                         after: tf.Operation,
                         snapshots: Optional[Dict[str, tf.Tensor]]
                         ) -> tf.Tensor:
  """Top-1 accuracy of the sampled architecture on the validation batch.

  `pre_update` (snapshots given): the pass computes with the weights read
  before this step's update, as the released TuNAS does, and need not wait
  for the update. Otherwise every op of the pass (including the variable
  reads) runs after the update where the plan says so
  (`StepPlan.validation_after_update`).
  """
  with tf.control_dependencies(
      [after] if plan.validation_after_update else []):
    logits = validation_logits(config, plan, masked_spec,
                               batch.validation_images, snapshots)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32),
                       batch.validation_labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
  if config.constant_validation_accuracy is not None:
    accuracy = tf.constant(config.constant_validation_accuracy, tf.float32)
  return accuracy


def _reward(config: SearchConfig, masked_spec: Any,
            accuracy: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Accuracy plus the cost adjustment of the configured cost model."""
  if config.cost_model == cost_models.NONE:
    return {'reward': accuracy}
  model = cost_models.get(config.cost_model)
  context = cost_models.context_for(config)
  cost = tf.cast(model.tf_cost(masked_spec, context), tf.float32)
  terms = rewards.compute_reward(
      config.rl_reward_function, accuracy, cost, config.rl_cost_model_target,
      config.rl_cost_model_exponent)
  return {'reward': terms.reward, 'estimated_cost': cost,
          'cost_ratio': terms.cost_ratio,
          'cost_adjustment': terms.cost_adjustment}


def _controller_step(config: SearchConfig, sample, logits: List[tf.Variable],
                     reward: tf.Tensor, step: tf.Tensor,
                     global_step: tf.Variable) -> Dict[str, tf.Tensor]:
  """REINFORCE with a cross-replica EMA baseline; increments the global step.

  `logits` are the controller's variables (`controller.create_logits`);
  `step` is the global step read at the start of this step.
  """
  def mean(x):
    return replicas.cross_replica_mean(x, config.num_replicas, config.use_tpu)

  step_baseline = mean(reward)
  baseline = rewards.ema_baseline(step_baseline, config.rl_baseline_momentum,
                                  scope=CONTROLLER_SCOPE + '/baseline')
  advantage = reward - baseline
  # The REINFORCE term goes through Adam, the entropy bonus through a plain
  # gradient step (docs/method.md, "Controller").
  empirical_loss = rewards.reinforce_loss(sample.log_prob, advantage,
                                          sample.entropy, 0.0)
  entropy_loss = -config.rl_entropy_regularization * sample.entropy
  loss = empirical_loss + entropy_loss
  learning_rate = schedules.rl_learning_rate(
      step, config.scaled_rl_learning_rate, config.total_steps,
      config.fraction_steps(config.rl_delay_steps_fraction),
      config.use_exponential_rl_learning_rate_schedule)
  grads = list(zip(tf.gradients(empirical_loss, logits), logits))
  finite = nonfinite.all_finite(loss, grads)
  grads = nonfinite.finite_or_zero(grads, finite)
  entropy_grads = None
  if config.rl_entropy_regularization:
    entropy_grads = [g for g, _ in nonfinite.finite_or_zero(
        zip(tf.gradients(entropy_loss, logits), logits), finite)]
  train_op = controller_adam.apply_adam(
      grads, learning_rate, mean, extra_grads=entropy_grads,
      global_step=global_step, scope=CONTROLLER_SCOPE + '/adam')
  return {'train_op': train_op, 'loss': loss,
          'empirical_loss': empirical_loss, 'entropy_loss': entropy_loss,
          'entropy': sample.entropy, 'log_prob': sample.log_prob,
          'step_baseline': step_baseline, 'baseline': baseline,
          'advantage': advantage, 'learning_rate': learning_rate}


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


def _summary_scalars(config: SearchConfig, decisions, arch: _Architecture,
                     model, rl, reward, accuracy) -> Dict[str, tf.Tensor]:
  """Every scalar a step logs, with the logits read after its update."""
  scalars = {f'model/{k}': v for k, v in model.items() if k != 'train_op'}
  scalars.update({f'{CONTROLLER_SCOPE}/{k}': v for k, v in rl.items()
                  if k != 'train_op'})
  scalars.update({f'{CONTROLLER_SCOPE}/{k}': v for k, v in reward.items()})
  scalars[f'{CONTROLLER_SCOPE}/validation_accuracy'] = accuracy
  scalars[f'{CONTROLLER_SCOPE}/increase_ops_prob'] = arch.increase_ops_prob
  scalars[f'{CONTROLLER_SCOPE}/increase_filters_prob'] = (
      arch.increase_filters_prob)
  if config.cost_model != cost_models.NONE:
    scalars[summaries.COST_TARGET_TAG] = tf.constant(
        config.rl_cost_model_target, tf.float32)
  # Read after the controller's update: the values logged at step n are the
  # ones the checkpoint of step n holds.
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


def make_model_fn(config: SearchConfig, plan: StepPlan, model_spec: Any,
                  write_summaries: bool = True):
  """Returns the TPUEstimator model_fn of a search (TRAIN mode only).

  Args:
    config: the validated search config.
    plan: the step's form (`config.plan.resolve`).
    model_spec: the search space's spec (no masks).
    write_summaries: False on the non-chief workers of a multi-worker
      search, so that only the chief writes events.
  """
  decisions = schema.decisions(model_spec)
  # Without --seed each run samples its own stream; with it, every run the
  # same one.
  seed_base = (config.seed if config.seed is not None
               else random.SystemRandom().randrange(2**31))

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
    batch = _unpack(features, labels, config)
    # 1. Sample an architecture. One read of the step for the whole step:
    # every schedule and summary sees the step before the controller's
    # increment.
    with placement.host_scope(plan.controller_on_host):
      step = global_step.read_value()
      arch = _sample_architecture(config, decisions, model_spec, step,
                                  seed_base)
    # 2-3. Train the shared weights and score the architecture.
    snapshots = {} if plan.validation_weights == 'pre_update' else None
    model = _shared_weight_step(config, plan, arch.masked_spec, batch, step,
                                snapshots)
    accuracy = _validation_accuracy(config, plan, arch.masked_spec, batch,
                                    model['train_op'], snapshots)
    # 4-5. Reward, baseline and the controller update.
    with placement.host_scope(plan.controller_on_host):
      reward = _reward(config, arch.masked_spec, accuracy)
      rl = _controller_step(config, arch.sample,
                            list(arch.logit_variables.values()),
                            reward['reward'], step, global_step)
      for key, value in ((SAMPLED_INDICES, arch.sample.indices),
                         (REPLICA_REWARD, reward['reward']),
                         (STEP_BASELINE, rl['step_baseline'])):
        tf1.add_to_collection(key, value)
      scalars = _summary_scalars(config, decisions, arch, model, rl, reward,
                                 accuracy)
      host_call = (_host_call(config, scalars, step) if write_summaries
                   else None)
    return tf1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=nonfinite.nan_unless_finite(model['loss'], rl['loss']),
        train_op=tf.group(model['train_op'], rl['train_op']),
        host_call=host_call, scaffold_fn=_scaffold_fn(config))

  return model_fn


def _scaffold_fn(config: SearchConfig) -> Optional[Callable]:
  """A scaffold without the readiness checks, for a one-process search.

  The default scaffold's two checks list the uninitialised variables (every
  weight and optimiser slot, thousands in a full space) before the first
  step, which costs start-up time (bench/startup.py). They exist for
  processes that wait on a chief; with one process, restoring a checkpoint
  already fails on a missing variable and a fresh start initialises all of
  them. TPU and several-replica searches keep them.
  """
  if config.use_tpu or config.num_replicas > 1 or config.multi_worker:
    return None
  nothing_missing = lambda: tf.constant([], tf.string)
  return lambda: tf1.train.Scaffold(
      ready_op=nothing_missing(),
      ready_for_local_init_op=nothing_missing())


# Public names of step pieces that other steps reuse (search/retarget.py:
# a fixed-weight controller run). Aliases only; the bodies are above.
unpack_batch = _unpack
sampling_seed = _sampling_seed
reward_terms = _reward
summary_host_call = _host_call
scaffold_fn = _scaffold_fn
sample_architecture = _sample_architecture
controller_step = _controller_step
summary_scalars = _summary_scalars
