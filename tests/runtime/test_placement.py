"""Tests for placing a step's control ops on the host."""

import tensorflow as tf

from tunas_search.runtime import placement

tf1 = tf.compat.v1

def test_pin_control_ops_moves_small_ops_computed_from_the_host():
  tf1 = tf.compat.v1
  with tf.Graph().as_default() as graph:
    with tf.device(placement.HOST):
      mask = tf.constant([0.0, 1.0, 0.0])
      counts = tf1.get_variable('counts', initializer=tf.zeros([3], tf.int64))
    # Unplaced and computed, like the network's activations.
    images = tf1.placeholder(tf.float32, [2, 8, 8, 3]) + 1.0
    first = len(graph.get_operations())
    entries = tf.unstack(mask, 3)
    active = entries[1] > 0  # Reads an unplaced scalar Const.
    both = tf.logical_or(active, entries[0] > 0)
    gathered = tf.gather(counts, [0, 2])  # Colocated with its variable.
    missed = gathered > 0
    wide = tf.tile(mask, [2000])  # Too large.
    scaled = images * entries[1]  # Reads an activation.
    noise = tf.random.uniform([]) + entries[1]  # Reads a stateful op.
    routed, _ = tf.raw_ops.Switch(data=images, pred=active)
    merged = tf.raw_ops.Merge(inputs=[images, routed])
    index_test = tf.equal(merged.value_index, 1)  # Host memory on a GPU.
    placed = placement.pin_control_ops(graph.get_operations()[first:])
  on_host = {op.name for op in placed}
  for tensor in [*entries, active, both, missed, index_test]:
    assert tensor.op.name in on_host, tensor.op.name
  # The comparisons' constants moved with their readers.
  assert active.op.inputs[1].op.name in on_host
  for tensor in (wide, scaled, noise, routed, merged.output, gathered):
    assert tensor.op.name not in on_host, tensor.op.name
    assert not tensor.op.device
  assert set(op.device for op in placed) == {placement.HOST}
