"""Cross-replica operations: TPU cores, several local devices, or one device.

On one replica (CPU, GPU, or `use_tpu=False`) the cross-replica operations are
identities and no TPU op is created, so the same model_fn runs everywhere.
Several GPUs of one host (or logical CPU devices, in tests) run the same
model_fn once per device under `tf.distribute.MirroredStrategy`
(`estimators.mirrored_strategy`); the cross-replica operations are then
all-reduces.
"""

from typing import Optional, Union

import tensorflow as tf

from tunas_search.config import TrainingFields
from tunas_search.tf_internals import xla as tf_xla

tf1 = tf.compat.v1


def _distributed_replica_context() -> Optional[tf.distribute.ReplicaContext]:
  """The tf.distribute replica context of a multi-device step, else None."""
  if not tf.distribute.has_strategy():
    return None
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return None
  return context


def cross_replica_mean(value: tf.Tensor, num_replicas: int,
                       use_tpu: bool) -> tf.Tensor:
  """Mean of `value` over replicas; the identity on one replica.

  TPU cores reduce with `cross_replica_sum`; the devices of a tf.distribute
  strategy (several GPUs, or logical CPUs in tests) with an all-reduce.
  """
  if use_tpu and num_replicas > 1:
    return tf1.tpu.cross_replica_sum(value) / float(num_replicas)
  context = _distributed_replica_context()
  if context is not None:
    # Not `context.all_reduce`: its gradient wrapper walks the graph into the
    # other replicas' variable reads and fails; no gradient flows through
    # these means.
    return context.merge_call(_mean_over_replicas, args=(value,))
  return tf.identity(value)


def _mean_over_replicas(strategy: tf.distribute.Strategy, value):
  """In cross-replica context: the mean, placed back on every replica."""
  return strategy.extended.reduce_to(tf.distribute.ReduceOp.MEAN, value,
                                     destinations=value)


def replica_id(use_tpu: bool, num_replicas: int) -> tf.Tensor:
  """int64 scalar: the index of the replica running this op (0 on one)."""
  if use_tpu and num_replicas > 1:
    return tf.cast(tf_xla.replica_id(), tf.int64)
  context = _distributed_replica_context()
  if context is not None:
    return tf.cast(context.replica_id_in_sync_group, tf.int64)
  return tf.constant(0, tf.int64)


def maybe_cross_shard(optimizer: tf1.train.Optimizer,
                      use_tpu: bool) -> tf1.train.Optimizer:
  """Wraps `optimizer` so gradients are averaged across TPU cores (TPU only)."""
  if use_tpu:
    return tf1.tpu.CrossShardOptimizer(optimizer)
  return optimizer


def model_optimizer(config: TrainingFields,
                    learning_rate: Union[float, tf.Tensor],
                    cross_shard: Optional[bool] = None
                    ) -> tf1.train.Optimizer:
  """The model weights' RMSProp (docs/method.md section 6), cross-shard on TPU.

  One recipe for the search's shared weights and for stand-alone training.

  Args:
    config: a search or train/eval config; reads `model_rmsprop_decay`,
      `model_momentum`, `model_rmsprop_epsilon` and, without
      `cross_shard`, `use_tpu`.
    learning_rate: float, or float32 scalar tensor (a schedule).
    cross_shard: average the gradients across TPU cores (a search's
      `StepPlan.layout.use_tpu`); None: `config.use_tpu`.
  """
  if cross_shard is None:
    cross_shard = config.use_tpu
  return maybe_cross_shard(tf1.train.RMSPropOptimizer(
      learning_rate, decay=config.model_rmsprop_decay,
      momentum=config.model_momentum, epsilon=config.model_rmsprop_epsilon),
                           cross_shard)
