"""Tests of the TensorFlow internals the project uses: each fails where the
pinned TensorFlow moves the private piece it relies on."""

import numpy as np
import tensorflow as tf

from tunas_search.supernet import ops
from tunas_search.tf_internals import estimator
from tunas_search.tf_internals import graph as tf_graph
from tunas_search.tf_internals import xla

tf1 = tf.compat.v1


def test_outside_control_flow_builds_outside_a_cond_and_restores_it():
  with tf.Graph().as_default(), ops.v1_control_flow():
    pred = tf1.placeholder(tf.bool, [])
    built = {}

    def branch():
      inner = tf.constant(1.0) + 1.0
      with tf_graph.outside_control_flow():
        built['outside'] = tf.constant(2.0) + 1.0
      built['after'] = tf.constant(3.0) + 1.0
      return inner
    tf.cond(pred, branch, lambda: tf.constant(0.0))
    top = tf.constant(4.0) + 1.0
    assert tf_graph.in_control_flow(built['after'].op)
    assert not tf_graph.in_control_flow(built['outside'].op)
    assert not tf_graph.in_control_flow(top.op)


def test_add_control_input_orders_an_op_that_exists():
  with tf.Graph().as_default():
    var = tf1.get_variable('v', initializer=1.0, use_resource=True)
    read = var.read_value()
    write = var.assign(5.0)
    tf_graph.add_control_input(read.op.inputs[0].op, write.op)
    with tf1.Session() as sess:
      sess.run(var.initializer)
      assert sess.run(read) == 5.0  # The read waits for the write.


def test_set_steps_per_run_is_the_hooks_host_loop():
  hook = tf1.train.CheckpointSaverHook('/nonexistent', save_steps=10)
  estimator.set_steps_per_run(hook, 5)
  assert hook._steps_per_run == 5  # pylint: disable=protected-access


def test_xla_replica_id_and_compile():
  with tf.Graph().as_default():
    assert xla.replica_id().op.type == 'XlaReplicaId'
    x = tf.constant([1.0, 2.0])
    y, = xla.compile(lambda v: [v * 3.0], [x])
    with tf1.Session() as sess:
      np.testing.assert_array_equal(sess.run(y), [3.0, 6.0])
