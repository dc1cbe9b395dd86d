"""Tests for the cross-replica helpers' one-replica paths."""

import tensorflow as tf

from tunas_search.runtime import replicas

tf1 = tf.compat.v1

def test_cross_replica_mean_is_identity_on_one_replica():
  with tf.Graph().as_default():
    x = tf.constant(2.5)
    y = replicas.cross_replica_mean(x, num_replicas=1, use_tpu=False)
    # No TPU op may appear in a CPU graph.
    assert not any('Tpu' in op.type or 'CrossReplica' in op.type
                   for op in tf1.get_default_graph().get_operations())
    with tf1.Session() as sess:
      assert sess.run(y) == 2.5


def test_optimizer_is_wrapped_only_on_tpu():
  opt = tf1.train.GradientDescentOptimizer(0.1)
  assert replicas.maybe_cross_shard(opt, use_tpu=False) is opt
  assert isinstance(replicas.maybe_cross_shard(opt, use_tpu=True),
                    tf1.tpu.CrossShardOptimizer)
