"""Tests for summary packing and the host_call that writes the summaries."""

import numpy as np
import pytest
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


def test_pack_summaries_gathers_vector_entries_once_per_vector():
  with tf.Graph().as_default() as graph:
    vector = tf.constant([[10.0, 11.0], [12.0, 13.0]])
    other = tf.constant([7, 8], tf.int32)
    names, packed = host_call.pack_summaries({
        'v/3': host_call.Entry(vector, 3), 'v/0': host_call.Entry(vector, 0),
        'o/1': host_call.Entry(other, 1), 'plain': tf.constant(2.5),
        'a': host_call.Entry(vector, 1)})
    wide = tf.range(64.0)
    before = len(graph.get_operations())
    _, wide_packed = host_call.pack_summaries(
        {f'w/{i:02d}': host_call.Entry(wide, 63 - i) for i in range(64)})
    added = len(graph.get_operations()) - before
    with tf1.Session() as sess:
      values = sess.run(packed)
      np.testing.assert_array_equal(sess.run(wide_packed), [63 - np.arange(64)])
      sliced = sess.run(host_call.summary_tensors(
          {'x': host_call.Entry(vector, 2)}))
  assert names == ['a', 'o/1', 'plain', 'v/0', 'v/3']
  np.testing.assert_allclose(values, [[11.0, 8.0, 2.5, 10.0, 13.0]])
  assert sliced == {'x': 12.0}
  # One flatten, one gather: no op per entry.
  assert added <= 8, [op.type for op in graph.get_operations()[before:]]


@pytest.mark.parametrize('entry, message', [
    (lambda: host_call.Entry(tf.zeros([2, 2]), 4),
     'entry 4 of a tensor of shape'),
    (lambda: host_call.Entry(tf.zeros([2, 2]), -1), 'entry -1 of a tensor'),
    (lambda: host_call.Entry(tf1.placeholder(tf.float32, [None]), 0),
     'need a static shape'),
])
def test_pack_summaries_refuses_entries_outside_their_tensor(entry, message):
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match=message):
      host_call.pack_summaries({'x': entry()})


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
