"""The parts of every layer: variables at their widths, and `choose`."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.space.schema import OP
from tunas_search.space.schema import OneOf
from tunas_search.supernet import layers
from tunas_search.supernet import widths
from tunas_search.supernet.ops import BuildContext
from tunas_search.supernet.weights import WeightUses

tf1 = tf.compat.v1


def _context(**kwargs) -> BuildContext:
  return BuildContext(is_training=True, batch_norm_mode='batch',
                      dtype=tf.float32, **kwargs)


def test_variables_are_named_after_their_scope_and_recorded():
  with tf.Graph().as_default():
    uses = WeightUses()
    ctx = _context(uses=uses)
    kernel = layers.conv_kernel('a/conv', 3, widths.fixed(4), widths.fixed(8),
                                ctx)
    depthwise = layers.depthwise_kernel('a/dw', 5, widths.fixed(8), ctx)
    bias = layers.bias('a/conv', widths.fixed(8), ctx)
    bn = layers.batch_norm_vars('a/bn', widths.fixed(8), ctx)
    assert kernel.shape.as_list() == [3, 3, 4, 8]
    assert depthwise.shape.as_list() == [5, 5, 8, 1]
    assert bias.shape.as_list() == [8]
    assert bn.gamma.shape.as_list() == bn.beta.shape.as_list() == [8]
    names = {v.op.name for v in tf1.global_variables()}
    assert {'a/conv/kernel', 'a/dw/kernel', 'a/conv/bias', 'a/bn/gamma',
            'a/bn/beta'} <= names
    # Built outside any choice: every use is unconditional.
    for name in ('a/conv/kernel', 'a/dw/kernel', 'a/conv/bias', 'a/bn/gamma'):
      assert uses.scales(name) is None


def test_stateful_batch_norm_refuses_a_sampled_width():
  with tf.Graph().as_default():
    ctx = BuildContext(is_training=True, batch_norm_mode='stateful',
                       dtype=tf.float32)
    sampled = widths.Width(((1.0, 8),), size=tf.constant(4))
    with pytest.raises(ValueError, match='a/bn: stateful batch norm'):
      layers.batch_norm_vars('a/bn', sampled, ctx)


def _recording_make(made):
  def make(choice, ctx):
    made.append((choice, ctx.in_cond))
    return lambda x, coef: x * float(choice)
  return make


def test_choose_builds_a_plain_value_once():
  with tf.Graph().as_default():
    made = []
    fn = layers.choose(3, 'k', _recording_make(made), _context(),
                       tf.zeros_like)
    with tf1.Session() as session:
      assert session.run(fn(tf.ones([2]))).tolist() == [3.0, 3.0]
  assert made == [(3, False)]


def test_choose_builds_only_the_selected_choice_of_a_fixed_decision():
  with tf.Graph().as_default():
    made = []
    value = OneOf([3, 5, 7], OP, mask=np.array([0.0, 1.0, 0.0]))
    fn = layers.choose(value, 'k', _recording_make(made), _context(),
                       tf.zeros_like)
    with tf1.Session() as session:
      assert session.run(fn(tf.ones([2]))).tolist() == [5.0, 5.0]
  assert made == [(5, False)]


def test_choose_builds_every_choice_of_a_searched_decision_in_a_choice():
  with tf.Graph().as_default():
    made = []
    value = OneOf([3, 5], OP, mask=tf.constant([0.0, 1.0]))
    fn = layers.choose(value, 'k', _recording_make(made), _context(),
                       tf.zeros_like)
    y = fn(tf.ones([2]))
    with tf1.Session() as session:
      assert session.run(y).tolist() == [5.0, 5.0]
  assert made == [(3, True), (5, True)]
