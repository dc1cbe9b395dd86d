"""The stand-alone model_fn: train, evaluate or predict one architecture.

The recipe is the search's shared-weight training (docs/method.md section 6) on a
fixed architecture (docs/method.md section 7): RMSProp, linear warm-up then cosine
decay, label smoothing, weight decay, stateful BN whose moving averages are
updated every step, dropout before the classifier.
"""

from typing import Any, List, Optional, Tuple

import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.search import schedules
from tunas_search import supernet
from tunas_search.data import untranspose_images
from tunas_search.runtime import host_call as host_call_lib
from tunas_search.runtime import replicas
from tunas_search.standalone import warm_start
from tunas_search.config.standalone import TrainEvalConfig

tf1 = tf.compat.v1
ModeKeys = tf.estimator.ModeKeys
CLASSIFIER_SCOPE = 'classifier'
# Top-k accuracies reported by an evaluation.
TOP_K = (1, 5)


def network(config: TrainEvalConfig, masked_spec: Any, images: tf.Tensor,
            is_training: bool) -> Tuple[tf.Tensor, List[tf.Variable]]:
  """Builds the stand-alone network.

  Returns:
    float32 logits [N, num_classes] and the variables the call created (in
    creation order; the network's weights and BN moving statistics).
  """
  before = {v.name for v in tf1.global_variables()}
  logits = supernet.build_network(
      masked_spec, images, config.num_classes, supernet.forms.standalone(
          is_training, dropout_rate=config.effective_dropout_rate,
          path_dropout_rate=config.path_dropout_rate),
      dtype=tf.bfloat16 if config.use_bfloat16 else tf.float32)
  created = [v for v in tf1.global_variables() if v.name not in before]
  return logits, created


def is_classifier(variable: tf.Variable) -> bool:
  return variable.name.startswith(CLASSIFIER_SCOPE + '/')


def _train_spec(config: TrainEvalConfig, logits: tf.Tensor,
                labels: tf.Tensor, variables: List[tf.Variable],
                search_weights: Optional[warm_start.SearchWeights]):
  """One RMSProp step on a training batch, plus summaries via host_call."""
  global_step = tf1.train.get_or_create_global_step()
  # One read for the step: schedules and summaries see the step before the
  # optimizer's increment.
  step = global_step.read_value()
  one_hot = tf.one_hot(labels, config.num_classes)
  empirical_loss = tf1.losses.softmax_cross_entropy(
      one_hot, logits, label_smoothing=config.label_smoothing)
  trainable = [v for v in variables if v.trainable]
  if config.freeze_backbone:
    trainable = [v for v in trainable if is_classifier(v)]
  # The classifier is not weight-decayed (docs/method.md section 2), so a linear
  # probe trains without weight decay.
  regularization_loss = supernet.regularization_loss(config.weight_decay,
                                                     trainable)
  loss = empirical_loss + regularization_loss
  learning_rate = schedules.cosine_with_warmup(
      step, config.scaled_model_learning_rate, config.total_steps,
      config.warmup_steps)
  optimizer = replicas.model_optimizer(config, learning_rate)
  # Stateful BN's moving averages are updated with every step.
  with tf.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
    train_op = optimizer.minimize(loss, global_step=global_step,
                                  var_list=trainable)
  correct = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
  scalars = {'model/loss': loss, 'model/empirical_loss': empirical_loss,
             'model/regularization_loss': regularization_loss,
             'model/learning_rate': learning_rate,
             'model/train_accuracy': tf.reduce_mean(tf.cast(correct,
                                                            tf.float32))}
  names, packed = host_call_lib.pack_summaries(scalars)
  # Logged under the number of the step that produced them (the checkpoint
  # written after it), at loops, checkpoints and the last step, as a search.
  host_call = host_call_lib.make_host_call(
      config.model_dir, names, packed, step + 1,
      (config.tpu_iterations_per_loop, config.iterations_per_checkpoint),
      final_step=config.total_steps)
  scaffold_fn = None
  if search_weights is not None:
    init_fn = warm_start.scaffold_init_fn(search_weights.assignments(
        variables))
    scaffold_fn = lambda: tf1.train.Scaffold(init_fn=init_fn)
  return tf1.estimator.tpu.TPUEstimatorSpec(
      mode=ModeKeys.TRAIN, loss=loss, train_op=train_op, host_call=host_call,
      scaffold_fn=scaffold_fn)


def metric_fn(labels: tf.Tensor, logits: tf.Tensor):
  """Top-1 and top-5 accuracy (`top_<k>_accuracy`); runs on the host."""
  metrics = {}
  for k in TOP_K:
    k_used = min(k, int(logits.shape[-1]))  # Fewer classes than k: all hit.
    hit = tf.math.in_top_k(targets=labels, predictions=logits, k=k_used)
    metrics[f'top_{k}_accuracy'] = tf1.metrics.mean(tf.cast(hit, tf.float32))
  return metrics


def _eval_spec(config: TrainEvalConfig, logits: tf.Tensor, labels: tf.Tensor):
  """Plain cross-entropy (no smoothing, no weight decay) and top-k."""
  loss = tf1.losses.softmax_cross_entropy(
      tf.one_hot(labels, config.num_classes), logits)
  return tf1.estimator.tpu.TPUEstimatorSpec(
      mode=ModeKeys.EVAL, loss=loss, eval_metrics=(metric_fn,
                                                   [labels, logits]))


def make_model_fn(config: TrainEvalConfig, model_spec: Any,
                  search_weights: Optional[warm_start.SearchWeights] = None):
  """Returns the TPUEstimator model_fn of one stand-alone architecture.

  Args:
    config: the validated config; `config.indices` must fit `model_spec`.
    model_spec: the spec `config.indices` indexes (no masks).
    search_weights: initialise from this search before the first step (the
      Scaffold init_fn runs only when model_dir has no checkpoint).

  Raises:
    architecture.ArchitectureError: if the indices do not fit the spec.

  With `config.freeze_backbone` only the classifier trains. Its BN layers
  still normalise with batch statistics while training and update their
  moving averages (the search trained the backbone with batch statistics
  and never kept moving averages, docs/method.md section 4, so they must be
  estimated); evaluation uses the moving averages.
  """
  indices = architecture.parse_indices(config.indices, model_spec)
  masked_spec = architecture.with_indices(model_spec, indices)

  def model_fn(features, labels, mode, params):
    del params  # Batch sizes are already in the input pipeline's tensors.
    images = features
    if config.use_tpu and mode != ModeKeys.PREDICT:
      images = untranspose_images(images)  # Undo the host-side transpose.
    logits, variables = network(config, masked_spec, images,
                                is_training=mode == ModeKeys.TRAIN)
    if mode == ModeKeys.PREDICT:
      return tf1.estimator.tpu.TPUEstimatorSpec(mode=mode, predictions={
          'logits': logits, 'probabilities': tf.nn.softmax(logits),
          'classes': tf.argmax(logits, -1, output_type=tf.int32)})
    labels = tf.cast(labels, tf.int32)
    if mode == ModeKeys.EVAL:
      return _eval_spec(config, logits, labels)
    return _train_spec(config, logits, labels, variables, search_weights)

  return model_fn
