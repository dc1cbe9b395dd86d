"""Tests of the TensorFlow internals the project uses: each fails where the
pinned TensorFlow moves the private piece it relies on."""

import numpy as np
import tensorflow as tf

from tunas_search.supernet import ops
from tunas_search.tf_internals import estimator
from tunas_search.tf_internals import functions
from tunas_search.tf_internals import graph as tf_graph
from tunas_search.tf_internals import slices
from tunas_search.tf_internals import xla

tf1 = tf.compat.v1


def test_outside_control_flow_builds_outside_a_cond_and_restores_it():
  with tf.Graph().as_default() as graph, ops.v1_control_flow():
    pred = tf1.placeholder(tf.bool, [])
    built = {}

    def branch():
      inner = tf.constant(1.0) + 1.0
      with tf_graph.outside_control_flow():
        built['outside'] = tf.constant(2.0) + 1.0
      built['after'] = tf.constant(3.0) + 1.0
      built['context'] = tf_graph.control_flow_context_id(graph)
      return inner
    tf.cond(pred, branch, lambda: tf.constant(0.0))
    top = tf.constant(4.0) + 1.0
    assert tf_graph.in_control_flow(built['after'].op)
    assert not tf_graph.in_control_flow(built['outside'].op)
    assert not tf_graph.in_control_flow(top.op)
    assert built['context'] != tf_graph.control_flow_context_id(graph)


def test_add_control_input_orders_an_op_that_exists():
  with tf.Graph().as_default():
    var = tf1.get_variable('v', initializer=1.0, use_resource=True)
    read = var.read_value()
    write = var.assign(5.0)
    tf_graph.add_control_input(read.op.inputs[0].op, write.op)
    with tf1.Session() as sess:
      sess.run(var.initializer)
      assert sess.run(read) == 5.0  # The read waits for the write.


def test_a_never_inlined_function_is_one_call_node():
  with tf.Graph().as_default() as graph:
    multiply = functions.never_inlined(lambda a, b: a * b, 'multiply',
                                       [tf.float32, tf.float32])
    before = len(graph.get_operations())
    y = multiply(tf.constant(2.0), tf.constant(3.5))
    added = graph.get_operations()[before:]
    assert [op.type for op in added][-1].startswith('multiply')
    assert all(op.type == 'Const' for op in added[:-1])
    with tf1.Session() as sess:
      assert sess.run(y) == 7.0


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


def test_prefix_slice_gradient_is_tensorflows_padded_and_shared():
  with tf.Graph().as_default() as graph:
    value = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    rows = tf1.placeholder(tf.int32, [])
    size = slices.shared(('test', rows.name),
                         lambda: tf.stack([rows, tf.constant(4)]))
    assert slices.shared(('test', rows.name), lambda: None) is size
    mine = [slices.prefix_slice(value, size) for _ in range(2)]
    theirs = tf.slice(value, [0, 0], size)
    want, = tf.gradients(tf.reduce_sum(theirs * theirs), [value])
    before = len(graph.get_operations())
    got, = tf.gradients(tf.reduce_sum(mine[0] * mine[0])
                        + tf.reduce_sum(mine[1] * mine[1]), [value])
    pads = [op for op in graph.get_operations()[before:] if op.type == 'Pad']
    assert len(pads) == 2 and pads[0].inputs[1] is pads[1].inputs[1]
    with tf1.Session() as sess:
      for n in (1, 3):
        expected = sess.run(want, {rows: n})
        assert expected[n:].sum() == 0
        np.testing.assert_array_equal(sess.run(got, {rows: n}), 2 * expected)
