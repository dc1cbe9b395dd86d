"""The search model_fn: one TuNAS step, read top to bottom like the paper.

Each step (Bender et al. 2020, section 3; SPEC.md sections 5-6):
  1. the controller samples an architecture (one mask per decision),
  2. the shared weights take one RMSProp step on a training batch through
     that architecture,
  3. after the weight update (gradient-sync barrier) the same architecture
     is scored on a held-out validation batch,
  4. accuracy and the estimated cost become a reward; the cross-replica mean
     reward feeds an EMA baseline,
  5. the controller takes one REINFORCE/Adam step, which increments the
     global step.
Every scalar and every controller logit goes to TensorBoard via host_call.
"""

from typing import Any, Dict, List, NamedTuple, Optional

import tensorflow as tf

from tunas_search import controller
from tunas_search import cost_models
from tunas_search import rewards
from tunas_search import schedules
from tunas_search import schema
from tunas_search import supernet
from tunas_search import tpu
from tunas_search.config import SearchConfig
from tunas_search.data import untranspose_images

tf1 = tf.compat.v1
CONTROLLER_SCOPE = 'rlcontroller'


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


def _sampling_seed(config: SearchConfig,
                   global_step: tf.Tensor) -> Optional[tf.Tensor]:
  """A per-replica, per-step seed for the controller on TPU; None elsewhere.

  Every TPU core runs the same program with the same graph-level seed, so a
  stateful random op would draw the same architecture on every core. Mixing
  the replica id into a stateless seed gives each core its own architecture
  every step (SPEC.md section 5).
  """
  if not config.use_tpu or config.num_replicas == 1:
    return None
  from tensorflow.compiler.tf2xla.python import xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  replica = tf.cast(xla.replica_id(), tf.int32)
  step = tf.cast(global_step, tf.int32)
  base = config.seed or 0
  return tf.stack([step, replica * 7919 + base])


def _network(config: SearchConfig, masked_spec: Any, images: tf.Tensor):
  """The weight-shared network with batch-statistics BN (SPEC.md section 4)."""
  return supernet.build_network(
      masked_spec, images, config.num_classes, is_training=True,
      batch_norm_mode='batch',
      dtype=tf.bfloat16 if config.use_bfloat16 else tf.float32)


def _model_variables() -> List[tf.Variable]:
  return [v for v in tf1.trainable_variables()
          if not v.name.startswith(CONTROLLER_SCOPE + '/')]


def _finite_or_zero(grads_and_vars, finite: tf.Tensor):
  """Zeroes all gradients of a step whose loss is not finite.

  The step then leaves the weights finite, so a checkpoint written at the
  step where the run stops on a NaN loss is still a good one.
  """
  return [(tf.where(finite, g, tf.zeros_like(g)), v)
          for g, v in grads_and_vars if g is not None]


def _with_barrier(grads_and_vars):
  """Gradient-sync barrier: no gradient is applied before all exist."""
  grads = [g for g, _ in grads_and_vars]
  with tf.control_dependencies(grads):
    return [(tf.identity(g), v) for g, v in grads_and_vars]


def _shared_weight_step(config: SearchConfig, masked_spec: Any, batch: _Batch,
                        global_step: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Trains the shared weights on the training batch; returns its tensors."""
  logits = _network(config, masked_spec, batch.train_images)
  one_hot = tf.one_hot(batch.train_labels, config.num_classes)
  empirical_loss = tf1.losses.softmax_cross_entropy(
      one_hot, logits, label_smoothing=config.label_smoothing)
  variables = _model_variables()
  regularization_loss = supernet.regularization_loss(config.weight_decay,
                                                     variables)
  loss = empirical_loss + regularization_loss
  learning_rate = schedules.cosine_with_warmup(
      global_step, config.scaled_model_learning_rate, config.total_steps,
      config.fraction_steps(config.model_warmup_steps_fraction))
  optimizer = tpu.maybe_cross_shard(tf1.train.RMSPropOptimizer(
      learning_rate, decay=config.model_rmsprop_decay,
      momentum=config.model_momentum, epsilon=config.model_rmsprop_epsilon),
                                    config.use_tpu)
  grads_and_vars = optimizer.compute_gradients(loss, var_list=variables)
  grads_and_vars = _finite_or_zero(grads_and_vars, tf.math.is_finite(loss))
  if config.use_gradient_sync_barrier:
    grads_and_vars = _with_barrier(grads_and_vars)
  train_op = optimizer.apply_gradients(grads_and_vars)  # No global step here.
  return {'train_op': train_op, 'loss': loss, 'empirical_loss': empirical_loss,
          'regularization_loss': regularization_loss,
          'learning_rate': learning_rate}


def _validation_accuracy(config: SearchConfig, masked_spec: Any, batch: _Batch,
                         after: tf.Operation) -> tf.Tensor:
  """Top-1 accuracy of the sampled architecture on the validation batch.

  With the barrier on, every op of this pass (including the variable reads)
  is created under a control dependency on the weight update, so the
  controller sees the accuracy measured after the update (SPEC.md section 5).
  """
  deps = [after] if config.use_gradient_sync_barrier else []
  with tf.control_dependencies(deps):
    logits = _network(config, masked_spec, batch.validation_images)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32),
                       batch.validation_labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
  if config.constant_validation_accuracy is not None:
    accuracy = tf.constant(config.constant_validation_accuracy, tf.float32)
  return accuracy


def _reward(config: SearchConfig, masked_spec: Any,
            accuracy: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Accuracy plus the cost adjustment of the configured cost model."""
  if config.cost_model == 'none':
    return {'reward': accuracy}
  model = cost_models.get(config.cost_model)
  context = cost_models.CostContext(
      space_name=config.cost_model_space, image_size=config.image_size,
      num_classes=config.num_classes, input_channels=config.input_channels)
  cost = tf.cast(model.tf_cost(masked_spec, context), tf.float32)
  terms = rewards.compute_reward(
      config.rl_reward_function, accuracy, cost, config.rl_cost_model_target,
      config.rl_cost_model_exponent)
  return {'reward': terms.reward, 'estimated_cost': cost,
          'cost_ratio': terms.cost_ratio,
          'cost_adjustment': terms.cost_adjustment}


def _controller_step(config: SearchConfig, sample, logits: List[tf.Variable],
                     reward: tf.Tensor,
                     global_step: tf.Tensor) -> Dict[str, tf.Tensor]:
  """REINFORCE with a cross-replica EMA baseline; increments the global step."""
  step_baseline = tpu.cross_replica_mean(reward, config.num_replicas,
                                         config.use_tpu)
  baseline = rewards.ema_baseline(step_baseline, config.rl_baseline_momentum,
                                  scope=CONTROLLER_SCOPE + '/baseline')
  advantage = reward - baseline
  loss = rewards.reinforce_loss(sample.log_prob, advantage, sample.entropy,
                                config.rl_entropy_regularization)
  learning_rate = schedules.rl_learning_rate(
      global_step, config.scaled_rl_learning_rate, config.total_steps,
      config.fraction_steps(config.rl_delay_steps_fraction),
      config.use_exponential_rl_learning_rate_schedule)
  optimizer = tpu.maybe_cross_shard(
      schedules.controller_optimizer(learning_rate), config.use_tpu)
  grads_and_vars = optimizer.compute_gradients(loss, var_list=logits)
  grads_and_vars = _finite_or_zero(grads_and_vars, tf.math.is_finite(loss))
  train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
  return {'train_op': train_op, 'empirical_loss': -tf.stop_gradient(
      advantage) * sample.log_prob, 'entropy_loss':
          -config.rl_entropy_regularization * sample.entropy,
          'entropy': sample.entropy, 'log_prob': sample.log_prob,
          'step_baseline': step_baseline, 'baseline': baseline,
          'advantage': advantage, 'learning_rate': learning_rate}


def logit_summaries(decisions: List[schema.Decision],
                    logits: List[tf.Variable]) -> Dict[str, tf.Tensor]:
  """`rlpathlogits/<path>/<j>` and `rltaglogits/<tag>_indices_<k>/<j>`."""
  out = {}
  for d, var in zip(decisions, logits):
    for j in range(d.num_choices):
      out[controller.path_logit_tag(d, j)] = var[j]
      out[controller.tag_logit_tag(d, j)] = var[j]
  return out


def make_model_fn(config: SearchConfig, model_spec: Any):
  """Returns the TPUEstimator model_fn of a search (TRAIN mode only).

  Args:
    config: the validated search config.
    model_spec: the search space's spec (no masks).
  """
  decisions = schema.decisions(model_spec)

  def model_fn(features, labels, mode, params):
    del params  # Batch sizes are already in the input pipeline's tensors.
    if mode != tf.estimator.ModeKeys.TRAIN:
      raise ValueError(f'a search only trains; got mode {mode!r}')
    global_step = tf1.train.get_or_create_global_step()
    batch = _unpack(features, labels, config)

    # 1. Sample an architecture.
    logits = controller.create_logits(decisions, scope=CONTROLLER_SCOPE)
    p_ops = schedules.linear_decay_prob(global_step, config.fraction_steps(
        config.increase_ops_warmup_steps_fraction))
    p_filters = schedules.linear_decay_prob(global_step, config.fraction_steps(
        config.increase_filters_warmup_steps_fraction))
    sample = controller.sample(
        decisions, logits, increase_ops_prob=p_ops,
        increase_filters_prob=p_filters, temperature=config.rl_temperature,
        stateless_seed=_sampling_seed(config, global_step))
    masked_spec = schema.with_masks(
        model_spec, [tf.stop_gradient(m) for m in sample.masks])

    # 2-3. Train the shared weights, then validate after the update.
    model = _shared_weight_step(config, masked_spec, batch, global_step)
    accuracy = _validation_accuracy(config, masked_spec, batch,
                                    model['train_op'])
    # 4-5. Reward, baseline and the controller update.
    reward = _reward(config, masked_spec, accuracy)
    rl = _controller_step(config, sample, logits, reward['reward'],
                          global_step)

    scalars = {f'model/{k}': v for k, v in model.items() if k != 'train_op'}
    scalars.update({f'rlcontroller/{k}': v for k, v in rl.items()
                    if k != 'train_op'})
    scalars.update({f'rlcontroller/{k}': v for k, v in reward.items()})
    scalars['rlcontroller/validation_accuracy'] = accuracy
    scalars['rlcontroller/increase_ops_prob'] = p_ops
    scalars['rlcontroller/increase_filters_prob'] = p_filters
    scalars.update(logit_summaries(decisions, logits))
    names, packed = tpu.pack_summaries(scalars)
    host_call = tpu.make_host_call(config.model_dir, names, packed,
                                   global_step, config.tpu_iterations_per_loop)
    return tf1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=model['loss'],
        train_op=tf.group(model['train_op'], rl['train_op']),
        host_call=host_call)

  return model_fn
