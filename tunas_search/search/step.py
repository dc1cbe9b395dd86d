"""One TuNAS search step, read top to bottom like the paper.

Each step (Bender et al. 2020, section 3; docs/method.md) is `search_step`,
one function per part:
  1. `sample_architecture`: the controller samples an architecture (one
     mask per decision),
  2. `train_shared_weights`: the shared weights take one RMSProp step on a
     training batch through that architecture, decayed only where the
     architecture uses them (`shared_update`: TuNAS's every-step RMSProp or
     the deferred form),
  3. `validate`: the same architecture is scored on a held-out validation
     batch, with the weights read before this step's update (`pre_update`,
     as the released TuNAS) or after it (`post_update`),
  4. `reward`: accuracy and the estimated cost become a reward,
  5. `update_controller`: the cross-replica mean reward feeds an EMA
     baseline and the controller takes one REINFORCE step with TuNAS's
     cross-replica Adam, which increments the global step.
The step's form (XLA or graph build, widths, update, validation weights,
barrier) is the `StepPlan`'s, decided once at start (config/plan.py), and the
config gives only the method's hyperparameters. Running the step (the mode,
compilation, the input's layout, summaries, the NaN guard, the scaffold) is
`model_fn.make_model_fn`'s; where the parts run is `placement.StepDevices`'.
"""

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional

import tensorflow as tf

from tunas_search.controller import policy as controller
from tunas_search.controller import adam as controller_adam
from tunas_search import cost_models
from tunas_search.search import nonfinite
from tunas_search.search import rewards
from tunas_search.search import schedules
from tunas_search.search import shared_update
from tunas_search.space import schema
from tunas_search.config import SearchConfig
from tunas_search.config.plan import StepPlan
from tunas_search.runtime import placement
from tunas_search.supernet import forms

tf1 = tf.compat.v1
# Variable scope of the controller's logits, baseline and Adam slots.
CONTROLLER_SCOPE = controller.DEFAULT_SCOPE


class Batch(NamedTuple):
  """One step's input: float32 [N, H, W, C] images, int32 [N] labels."""
  train_images: tf.Tensor
  train_labels: tf.Tensor
  validation_images: tf.Tensor
  validation_labels: tf.Tensor


class Architecture(NamedTuple):
  """Step 1's outputs: the sampled architecture and what produced it.

  Attributes:
    logit_variables: the controller's logits, {n: [m, n] variable}.
    sample: masks, indices, log-prob and entropy of the sample.
    masked_spec: the model spec with the sampled mask on every decision.
    increase_ops_prob, increase_filters_prob: the warm-ups' float32 scalars.
  """
  logit_variables: Dict[int, tf.Variable]
  sample: controller.ControllerSample
  masked_spec: Any
  increase_ops_prob: tf.Tensor
  increase_filters_prob: tf.Tensor


def sample_architecture(config: SearchConfig, decisions: List[schema.Decision],
                        model_spec: Any, step: tf.Tensor,
                        seed: tf.Tensor) -> Architecture:
  """The controller's architecture for this step, with the warm-ups.

  Args:
    config: the search config (warm-up fractions, temperature).
    decisions: `schema.decisions(model_spec)`.
    model_spec: the search space's spec (no masks).
    step: the global step read at the start of this step.
    seed: int64 [3], this step's stateless seed on this replica.
  """
  variables = controller.create_logits(decisions, scope=CONTROLLER_SCOPE)
  logits = controller.decision_logits(decisions, variables)
  p_ops = schedules.linear_decay_prob(step, config.fraction_steps(
      config.increase_ops_warmup_steps_fraction))
  p_filters = schedules.linear_decay_prob(step, config.fraction_steps(
      config.increase_filters_warmup_steps_fraction))
  sample = controller.sample(
      decisions, logits, increase_ops_prob=p_ops,
      increase_filters_prob=p_filters, temperature=config.rl_temperature,
      stateless_seed=seed)
  masked_spec = schema.with_masks(
      model_spec, [tf.stop_gradient(m) for m in sample.masks])
  return Architecture(variables, sample, masked_spec, p_ops, p_filters)


class Training(NamedTuple):
  """Step 2's outputs.

  Attributes:
    train_op: the shared weights' update.
    finite: bool scalar, whether its loss and gradients were finite.
    reads: the weight reads the training pass computed with
      (`shared_update.Forward.reads`).
    loss, empirical_loss, regularization_loss, learning_rate: float32
      scalars (the loss as computed, finite or not).
  """
  train_op: tf.Operation
  finite: tf.Tensor
  reads: Mapping[str, tf.Tensor]
  loss: tf.Tensor
  empirical_loss: tf.Tensor
  regularization_loss: tf.Tensor
  learning_rate: tf.Tensor


def model_variables() -> List[tf.Variable]:
  """The shared weights: every trainable variable but the controller's."""
  return [v for v in tf1.trainable_variables()
          if not v.name.startswith(CONTROLLER_SCOPE + '/')]


def train_shared_weights(config: SearchConfig,
                         update: shared_update.SharedWeightUpdate,
                         masked_spec: Any, batch: Batch, step: tf.Tensor,
                         devices: placement.StepDevices) -> Training:
  """One RMSProp step of the shared weights on the training batch.

  Args:
    config: the search config (label smoothing, the learning-rate schedule).
    update: the plan's shared-weight update (`shared_update.for_plan`).
    masked_spec: the sampled architecture's masked spec.
    batch: this step's input.
    step: the global step read at the start of this step.
    devices: where the learning-rate schedule runs.
  """
  forward = update.forward(masked_spec, batch.train_images)
  one_hot = tf.one_hot(batch.train_labels, config.num_classes)
  empirical_loss = tf1.losses.softmax_cross_entropy(
      one_hot, forward.logits, label_smoothing=config.label_smoothing)
  # Only what the sampled architecture uses is decayed (docs/method.md).
  loss = empirical_loss + forward.regularization_loss
  with devices.host():
    learning_rate = schedules.cosine_with_warmup(
        step, config.scaled_model_learning_rate, config.total_steps,
        config.fraction_steps(config.model_warmup_steps_fraction))
  train_op, finite = update.step(loss, empirical_loss, forward,
                                 model_variables(), step, learning_rate)
  return Training(train_op, finite, forward.reads, loss, empirical_loss,
                  forward.regularization_loss, learning_rate)


def validation_logits(config: SearchConfig, plan: StepPlan,
                      masked_spec: Any, images: tf.Tensor,
                      reads: Optional[Mapping[str, tf.Tensor]] = None
                      ) -> tf.Tensor:
  """The supernet's validation pass: the network the reward scores.

  The shared weights under `masked_spec`'s masks with batch-statistics BN
  (docs/method.md sections 4-5), built in the plan's validation form. A
  one-shot score (evaluation/one_shot.py) builds its network here too, so
  that it is the search's own.

  Args:
    config: the search's config.
    plan: its step plan (form, widths, compute dtype).
    masked_spec: the model spec with a tensor mask on every decision.
    images: float32 [N, H, W, C].
    reads: the step's weight reads to compute with (pre_update
      validation), or None to read the variables.

  Returns:
    float32 logits [N, num_classes].
  """
  form = forms.named(plan.validation_form, plan.width_form)
  logits, _ = shared_update.network(config, plan, form, masked_spec, images,
                                    reads)
  return logits


def validate(config: SearchConfig, plan: StepPlan, masked_spec: Any,
             batch: Batch, training: Training) -> tf.Tensor:
  """Top-1 accuracy of the sampled architecture on the validation batch.

  `pre_update`: the pass computes with the weights the training pass read,
  before this step's update, as the released TuNAS does, and need not wait
  for the update. `post_update`: every op of the pass (including the
  variable reads) runs after the update where the plan says so
  (`StepPlan.validation_after_update`).

  Returns:
    float32 scalar.
  """
  reads = training.reads if plan.validation_weights == 'pre_update' else None
  with tf.control_dependencies(
      [training.train_op] if plan.validation_after_update else []):
    logits = validation_logits(config, plan, masked_spec,
                               batch.validation_images, reads)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32),
                       batch.validation_labels)
    return tf.reduce_mean(tf.cast(correct, tf.float32))


def reward(config: SearchConfig, masked_spec: Any,
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


def update_controller(config: SearchConfig, sample: controller.ControllerSample,
                      logits: List[tf.Variable], reward_value: tf.Tensor,
                      step: tf.Tensor, global_step: tf.Variable,
                      mean: Callable[[tf.Tensor], tf.Tensor]
                      ) -> Dict[str, tf.Tensor]:
  """REINFORCE with a cross-replica EMA baseline; increments the global step.

  Args:
    config: the search config (the controller's hyperparameters).
    sample: step 1's sample.
    logits: the controller's variables (`controller.create_logits`).
    reward_value: float32 scalar, this replica's reward.
    step: the global step read at the start of this step.
    global_step: the global step variable.
    mean: a tensor's mean over the step's replicas.
  """
  step_baseline = mean(reward_value)
  baseline = rewards.ema_baseline(step_baseline, config.rl_baseline_momentum,
                                  scope=CONTROLLER_SCOPE + '/baseline')
  advantage = reward_value - baseline
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


class Step(NamedTuple):
  """What one search step built, part by part, and the step it read."""
  step: tf.Tensor
  architecture: Architecture
  training: Training
  accuracy: tf.Tensor
  reward: Dict[str, tf.Tensor]
  controller: Dict[str, tf.Tensor]


Validate = Callable[[SearchConfig, StepPlan, Any, Batch, Training], tf.Tensor]


def search_step(config: SearchConfig, plan: StepPlan,
                decisions: List[schema.Decision], model_spec: Any,
                batch: Batch, global_step: tf.Variable, seed_base: int,
                devices: placement.StepDevices,
                validate_fn: Validate = validate) -> Step:
  """One TuNAS step (module docstring), built in the current graph.

  Args:
    config: the search config (the method's hyperparameters).
    plan: the step plan (the forms of the passes).
    decisions: `schema.decisions(model_spec)`.
    model_spec: the search space's spec (no masks).
    batch: this step's input.
    global_step: the global step variable.
    seed_base: the controller's seed (`config.seed`, or one per process).
    devices: where the parts run (`placement.StepDevices`).
    validate_fn: step 3 (`validate`; a test may give another).
  """
  # 1. Sample an architecture. One read of the step for the whole step:
  # every schedule and summary sees the step before the controller's
  # increment.
  with devices.host():
    step = global_step.read_value()
    arch = sample_architecture(config, decisions, model_spec, step,
                               sampling_seed(seed_base, step, devices))
  # 2. Train the shared weights through it.
  training = train_shared_weights(config, shared_update.for_plan(config, plan),
                                  arch.masked_spec, batch, step, devices)
  # 3. Score it on the validation batch.
  accuracy = validate_fn(config, plan, arch.masked_spec, batch, training)
  # 4-5. Reward, baseline and the controller update.
  with devices.host():
    step_reward = reward(config, arch.masked_spec, accuracy)
    rl = update_controller(config, arch.sample,
                           list(arch.logit_variables.values()),
                           step_reward['reward'], step, global_step,
                           devices.mean)
  return Step(step, arch, training, accuracy, step_reward, rl)


def sampling_seed(base: int, step: tf.Tensor,
                   devices: placement.StepDevices) -> tf.Tensor:
  """The controller's stateless seed for this step on this replica.

  (seed, step, replica): a search samples the same architectures whether or
  not XLA compiles the step (XLA ignores the seeds of stateful random ops,
  and its stateless ones draw other numbers than the CPU's), and after a
  resume; the replica id gives every replica its own architecture
  (docs/method.md section 5, `controller.counter_uniform`).

  Args:
    base: `config.seed`, or a number drawn once per process without one.
    step: the global step read at the start of the step.
    devices: the step's replicas.
  """
  replica = devices.replica_id()
  return tf.stack([tf.constant(base, tf.int64), tf.cast(step, tf.int64),
                   replica])
