"""Tests of build_networks: prefixes shared between architectures, exactly."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import Activation, Block, Conv, ConvTower
from tunas_search.supernet import build_network
from tunas_search.supernet import forms
from tunas_search.supernet import shared_prefix

tf1 = tf.compat.v1
NUM_CLASSES = 3
CONV_TYPES = ('Conv2D', 'DepthwiseConv2dNative')


def _spec():
  """A stem without decisions, then an op and a width decision, then an op."""
  return ConvTower((
      Block((Conv(3), Activation('relu')), 8),
      Block((OneOf((Conv(3), Conv(5)), schema.OP), Activation('relu')),
            OneOf((8, 16), schema.FILTERS)),
      Block((OneOf((Conv(3), Conv(5)), schema.OP),), 8),
  ))


# Decisions in traversal order: block 1's op, block 1's width, block 2's op.
def _one_hot(indices):
  sizes = [d.num_choices for d in schema.decisions(_spec())]
  return [np.eye(n, dtype=np.float32)[i] for n, i in zip(sizes, indices)]


class _Built:
  """Both builds of some architectures in one graph, masks fed per run."""

  def __init__(self, count: int, width_form: str = 'masked'):
    self.graph = tf.Graph()
    num_decisions = len(schema.decisions(_spec()))
    with self.graph.as_default():
      tf1.set_random_seed(0)
      self.masks = [[tf1.placeholder(tf.float32, [2])
                     for _ in range(num_decisions)] for _ in range(count)]
      specs = [schema.with_masks(_spec(), m) for m in self.masks]
      images = tf.constant(np.random.RandomState(0).normal(
          size=(4, 8, 8, 1)).astype(np.float32))
      form = forms.validation(width_form)
      self.networks = shared_prefix.build_networks(specs, images,
                                                   NUM_CLASSES, form)
      self.alone = [build_network(s, images, NUM_CLASSES, form)
                    for s in specs]
      self.session = tf1.Session(graph=self.graph)
      self.session.run(tf1.global_variables_initializer())

  def run(self, fetches, architectures, trace=False):
    feed = {p: v for ps, arch in zip(self.masks, architectures)
            for p, v in zip(ps, _one_hot(arch))}
    options = tf1.RunOptions(
        trace_level=tf1.RunOptions.FULL_TRACE if trace else 0)
    metadata = tf1.RunMetadata()
    values = self.session.run(fetches, feed, options=options,
                              run_metadata=metadata)
    return values, metadata

  def convs_run(self, architectures) -> int:
    """How many convolutions the shared build runs for these."""
    _, metadata = self.run(self.networks.logits, architectures, trace=True)
    return sum(1 for device in metadata.step_stats.dev_stats
               for node in device.node_stats
               if _op_type(self.graph, node.node_name) in CONV_TYPES)


def _op_type(graph, name):
  try:
    return graph.get_operation_by_name(name).type
  except KeyError:
    return None


@pytest.fixture(scope='module')
def three():
  return _Built(3)


@pytest.mark.parametrize('architectures', [
    [(0, 0, 0), (0, 0, 0), (0, 0, 0)],  # all agree
    [(0, 0, 0), (1, 1, 1), (0, 1, 0)],  # only the stem in common
    [(1, 0, 1), (1, 0, 0), (1, 1, 0)],  # a prefix of 1 and 2 decisions
    [(0, 1, 1), (1, 1, 1), (0, 1, 1)],  # 2 agrees with 0, not with 1
])
def test_logits_equal_the_unshared_builds(three, architectures):
  (shared, alone), _ = three.run((three.networks.logits, three.alone),
                                 architectures)
  scale = max(np.abs(a).max() for a in alone)
  for s, a in zip(shared, alone):
    # The same ops on the same inputs: equal up to float32 rounding of
    # values of this magnitude (they are equal bit for bit on CPU).
    np.testing.assert_allclose(s, a, rtol=0, atol=4 * np.finfo(
        np.float32).eps * scale)
  # Architectures that differ give different logits (the test can fail).
  assert not np.allclose(shared[0], shared[1]) or (
      architectures[0] == architectures[1])


def test_shared_layers_count_the_agreeing_prefix(three):
  # The stem's 2 layers, block 1's 2, block 2's 1 and the classifier.
  assert three.networks.num_layers == 6
  (counts,), _ = three.run((three.networks.shared_layers,),
                           [(0, 0, 0), (0, 1, 1), (0, 0, 1)])
  # 1 agrees with 0 on the stem (2 layers) only: block 1's width differs.
  # 2 agrees with 0 on the stem and block 1 (4 layers), not block 2.
  assert list(counts) == [0, 2, 4]
  (counts,), _ = three.run((three.networks.shared_layers,),
                           [(1, 1, 1)] * 3)
  assert list(counts) == [0, 6, 6]


def test_agreeing_architectures_cost_one_pass(three):
  one = _Built(1)
  single = one.convs_run([(0, 0, 0)])
  assert single == 3  # the stem's, block 1's and block 2's convolutions
  assert three.convs_run([(0, 0, 0)] * 3) == single
  # Only the stem in common: the other two compute all but the stem conv.
  assert three.convs_run([(0, 0, 0), (1, 1, 1), (0, 1, 0)]) == (
      single + 2 * (single - 1))


def test_sampled_widths_share_too():
  built = _Built(2, width_form='sampled')
  (shared, alone), _ = built.run((built.networks.logits, built.alone),
                                 [(1, 1, 0), (1, 1, 1)])
  for s, a in zip(shared, alone):
    np.testing.assert_allclose(s, a, rtol=0, atol=4 * np.finfo(
        np.float32).eps * np.abs(a).max())
  (counts,), _ = built.run((built.networks.shared_layers,),
                           [(1, 1, 0), (1, 1, 1)])
  assert list(counts) == [0, 4]


def test_a_training_form_is_refused():
  with tf.Graph().as_default():
    spec = schema.with_masks(_spec(), _one_hot((0, 0, 0)))
    with pytest.raises(ValueError, match='validation form'):
      shared_prefix.build_networks([spec], tf.zeros([2, 8, 8, 1]),
                                   NUM_CLASSES, forms.every_step('masked'))
    with pytest.raises(ValueError, match='at least one'):
      shared_prefix.build_networks([], tf.zeros([2, 8, 8, 1]), NUM_CLASSES,
                                   forms.validation('masked'))


def test_num_layers_and_the_undecided_prefix():
  # The stem's conv and activation come before block 1's decisions.
  assert shared_prefix.num_layers(_spec()) == 6
  assert shared_prefix.undecided_prefix(_spec()) == 2
