"""Tests for the host device scope of a step's scalar bookkeeping."""

import tensorflow as tf

from tunas_search.runtime import placement


def test_host_scope_pins_only_when_asked():
  with tf.Graph().as_default():
    with placement.host_scope(True):
      pinned = tf.constant(1.0) + 1.0
    with placement.host_scope(False):
      free = tf.constant(1.0) + 1.0
  assert pinned.device == placement.HOST
  assert free.device == ''
