"""Tests for summary packing and the host_call that writes the summaries."""

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2  # pylint: disable=g-direct-tensorflow-import

from tunas_search.runtime import host_call

tf1 = tf.compat.v1

def test_pack_summaries_sorts_names_and_keeps_values():
  with tf.Graph().as_default():
    names, packed = host_call.pack_summaries({'b': tf.constant(2.0),
                                              'a': tf.constant([3],
                                                               tf.int32)})
    with tf1.Session() as sess:
      values = sess.run(packed)
  assert names == ['a', 'b']
  np.testing.assert_allclose(values, [[3.0, 2.0]])


def test_host_call_writes_scalars_every_n_steps(tmp_path):
  with tf.Graph().as_default():
    step = tf1.placeholder(tf.int64, [])
    names, packed = host_call.pack_summaries(
        {'x/y': tf.cast(step, tf.float32) * 2})
    fn, tensors = host_call.make_host_call(str(tmp_path), names, packed, step,
                                           every_n_steps=2)
    ops = fn(*tensors)
    # TPUEstimator's host-call hook runs the writer's init and flush ops;
    # this test does the same by hand.
    init = summary_ops_v2.summary_writer_initializer_op()
    with tf1.Session() as sess:
      sess.run(init)
      for s in range(5):
        sess.run(ops, {step: s})
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  acc = event_accumulator.EventAccumulator(
      str(tmp_path), size_guidance={event_accumulator.TENSORS: 0})
  acc.Reload()
  events = acc.Tensors('x/y')
  assert [e.step for e in events] == [0, 2, 4]
  assert [float(tf.make_ndarray(e.tensor_proto)) for e in events] == [0, 4, 8]
