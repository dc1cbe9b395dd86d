"""The TPU branch of the search model_fn builds inside a replicated TPU
computation. No TPU is needed to build the graph (only to run it), so this
checks the TPU-only code paths as far as a CPU machine can."""

import tensorflow as tf

from tests.e2e import tiny
from tunas_search.space import architecture
from tunas_search.search import model_fn as search
from tunas_search.config import plan as plan_lib
from tunas_search.standalone import make_model_fn
from tunas_search.config.standalone import TrainEvalConfig

tf1 = tf.compat.v1


def test_model_fn_builds_for_two_tpu_replicas(tmp_path):
  config = tiny.tiny_config(tmp_path, use_tpu=True, num_replicas=2, tpu='x',
                            train_batch_size=4)
  plan = plan_lib.resolve(config)
  model_fn = search.make_model_fn(config, plan, tiny.tiny_spec())
  per_replica = config.train_batch_size // config.num_replicas

  def computation(train_images, validation_images, train_labels,
                  validation_labels):
    spec = model_fn({'train_images': train_images,
                     'validation_images': validation_images},
                    {'train_labels': train_labels,
                     'validation_labels': validation_labels},
                    tf.estimator.ModeKeys.TRAIN, {})
    with tf.control_dependencies([spec.train_op]):
      return tf.identity(spec.loss)

  with tf.Graph().as_default() as graph:
    # Host-side HWCN images, as the TPU input pipeline emits them.
    inputs = [[tf.zeros([28, 28, 1, per_replica]),
               tf.zeros([28, 28, 1, 4 * per_replica]),
               tf.zeros([per_replica], tf.int32),
               tf.zeros([4 * per_replica], tf.int32)]
              for _ in range(config.num_replicas)]
    outputs = tf1.tpu.replicate(computation, inputs=inputs)
    types = [op.type for op in graph.get_operations()]
  assert len(outputs) == 2
  # Per-replica controller seeds (each core samples its own architecture).
  assert 'XlaReplicaId' in types
  # Cross-replica reward mean for the baseline, plus the gradient averaging
  # of the two CrossShardOptimizers.
  assert types.count('CrossReplicaSum') >= 3


def test_standalone_model_fn_builds_for_two_tpu_replicas(tmp_path):
  spec = tiny.tiny_spec()
  config = TrainEvalConfig(
      search_space='tiny', indices=architecture.format_indices(
          architecture.largest(spec)), model_dir=str(tmp_path),
      num_classes=10, num_train_examples=10000, image_size=28,
      input_channels=1, train_batch_size=4, max_steps=4, use_tpu=True,
      num_replicas=2, tpu='x')
  model_fn = make_model_fn(config, spec)

  def computation(images, labels):
    est = model_fn(images, labels, tf.estimator.ModeKeys.TRAIN, {})
    with tf.control_dependencies([est.train_op]):
      return tf.identity(est.loss)

  with tf.Graph().as_default() as graph:
    inputs = [[tf.zeros([28, 28, 1, 2]), tf.zeros([2], tf.int32)]
              for _ in range(2)]
    outputs = tf1.tpu.replicate(computation, inputs=inputs)
    types = [op.type for op in graph.get_operations()]
  assert len(outputs) == 2
  assert 'CrossReplicaSum' in types  # CrossShardOptimizer on TPU only.
