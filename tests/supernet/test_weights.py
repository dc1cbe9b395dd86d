"""Tests of the sampled-path weight decay and of per-step weight snapshots.

The expected decay is computed in numpy over exactly the kernels and channels
a hand-picked architecture of the tiny test space uses (docs/method.md,
"Weight decay").
"""

import os
import sys
from typing import Dict, List, Tuple

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.supernet import build_network
from tunas_search.supernet import forms
from tunas_search.supernet import MaskedWeightDecay
from tunas_search.supernet import reading_snapshots
from tunas_search.supernet import regularization_loss
from tunas_search.supernet import WeightUses
from tunas_search.tf_internals import dead_gradients

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'e2e'))
import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position

WEIGHT_DECAY = 4e-5
# Decisions of tiny_spec(), in traversal order:
#   0 blocks/0/filters (8, 16)            1 blocks/1/layers/0/kernel_size (3, 5)
#   2 blocks/1/layers/0/expansion (1, 3)  3 layers/1 kernel_size (3, 5)
#   4 layers/1 expansion (1, 3)           5 blocks/1/layers/1/layer (bneck, Zero)
#   6 blocks/1/filters (8, 16, 24)
# Stem 16 filters; first bottleneck k5, expansion 3 (16 -> 48); the residual
# bottleneck on, k3, expansion 1 (8 -> 8); block width 8.
INDICES = [1, 1, 1, 0, 0, 0, 0]
L0 = 'blocks/1/layers/0'
L1 = 'blocks/1/layers/1/layer/choices/0'
# kernel -> (op scale, input channels used, output channels used). Kernels
# are stored at the largest widths: stem 16, block 24, expansions 48 and 72.
SAMPLED: Dict[str, Tuple[float, int, int]] = {
    'blocks/0/layers/0/conv_k3/kernel': (1.0, 1, 16),
    f'{L0}/expand/kernel': (1.0, 16, 48),
    f'{L0}/depthwise_k3/kernel': (0.0, 48, 1),
    f'{L0}/depthwise_k5/kernel': (1.0, 48, 1),
    f'{L0}/project/kernel': (1.0, 48, 8),
    f'{L1}/expand/kernel': (1.0, 8, 8),
    f'{L1}/depthwise_k3/kernel': (1.0, 8, 1),
    f'{L1}/depthwise_k5/kernel': (0.0, 8, 1),
    f'{L1}/project/kernel': (1.0, 8, 8),
    'blocks/2/layers/0/conv_k1/kernel': (1.0, 8, 32),
}
# The same architecture during op warm-up: every op decision is 1/2 each, so
# both depthwise kernels of the first bottleneck get 1/2, the residual
# bottleneck's shared kernels 1/2 and its depthwise kernels 1/2 * 1/2.
WARMUP_SCALES = {
    f'{L0}/depthwise_k3/kernel': 0.5, f'{L0}/depthwise_k5/kernel': 0.5,
    f'{L1}/expand/kernel': 0.5, f'{L1}/project/kernel': 0.5,
    f'{L1}/depthwise_k3/kernel': 0.25, f'{L1}/depthwise_k5/kernel': 0.25,
}


def _masks(warmup: bool) -> List[np.ndarray]:
  masks = architecture.one_hot_masks(tiny.tiny_spec(), INDICES)
  if warmup:
    for i, d in enumerate(schema.decisions(tiny.tiny_spec())):
      if d.tag == schema.OP:
        masks[i] = np.full(d.num_choices, 1.0 / d.num_choices, np.float32)
  return masks


def _build(masks: List[np.ndarray], as_tensors: bool):
  """Builds the tiny network; returns (graph, decay loss, decay, values)."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    spec = tiny.tiny_spec()
    if as_tensors:
      masks = [tf.constant(m, tf.float32) for m in masks]
    decay = MaskedWeightDecay()
    build_network(schema.with_masks(spec, masks), tf.zeros([2, 28, 28, 1]),
                  10, forms.every_step('masked'), decay=decay)
    loss = decay.loss(WEIGHT_DECAY)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      variables = tf.compat.v1.global_variables()
      values = dict(zip([v.name.split(':')[0] for v in variables],
                        sess.run(variables)))
      return float(sess.run(loss)), decay, values


def _expected(values: Dict[str, np.ndarray],
              scales: Dict[str, float]) -> float:
  total = 0.0
  for name, (scale, used_in, used_out) in SAMPLED.items():
    kernel = values[name].astype(np.float64)
    used = kernel[:, :, :used_in, :used_out]
    total += scales.get(name, scale) * np.sum(used ** 2)
  return 0.5 * WEIGHT_DECAY * total


def test_sampled_path_decays_only_selected_kernels_and_channels():
  loss, decay, values = _build(_masks(warmup=False), as_tensors=True)
  assert sorted(decay.names) == sorted(SAMPLED)
  # float32 sums of ~30k squares against float64: a few ulps of the total.
  assert loss == pytest.approx(_expected(values, {}), rel=1e-5)
  full = 0.5 * WEIGHT_DECAY * sum(np.sum(values[n].astype(np.float64) ** 2)
                                  for n in SAMPLED)
  assert loss < 0.8 * full  # Unselected kernels and channels left out.


def test_op_warmup_scales_each_choice_by_its_mask_entry():
  loss, _, values = _build(_masks(warmup=True), as_tensors=True)
  assert loss == pytest.approx(_expected(values, WARMUP_SCALES), rel=1e-5)


def test_stand_alone_network_gets_plain_l2_over_its_kernels():
  loss, decay, values = _build(_masks(warmup=False), as_tensors=False)
  # A stand-alone network has only the selected kernels, at their widths.
  kernels = [n for n in values if n.endswith('/kernel')
             and not n.startswith('classifier')]
  assert sorted(decay.names) == sorted(
      n for n in SAMPLED if SAMPLED[n][0] > 0)
  assert sorted(kernels) == sorted(decay.names)
  plain = 0.5 * WEIGHT_DECAY * sum(np.sum(values[n].astype(np.float64) ** 2)
                                   for n in kernels)
  assert loss == pytest.approx(plain, rel=1e-5)
  # The same as the variable-based decay the stand-alone trainer uses.
  graph = tf.Graph()
  with graph.as_default():
    spec = architecture.with_indices(tiny.tiny_spec(), INDICES)
    build_network(spec, tf.zeros([2, 28, 28, 1]), 10,
                  forms.standalone(is_training=True))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      assign = [v.assign(values[v.name.split(':')[0]])
                for v in tf.compat.v1.trainable_variables()]
      sess.run(assign)
      assert sess.run(regularization_loss(WEIGHT_DECAY)) == pytest.approx(
          plain, rel=1e-5)


def test_shared_kernel_is_decayed_by_its_largest_use():
  with tf.Graph().as_default():
    kernel = tf.constant(np.full([1, 1, 2, 3], 2.0, np.float32))
    decay = MaskedWeightDecay()
    decay.add('k', kernel, tf.constant(0.25))
    decay.add('k', kernel, tf.constant(0.5),
              out_mask=tf.constant([1.0, 1.0, 0.0]))  # 4 entries of 4.0.
    decay.add('other', kernel, in_mask=tf.constant([1.0, 0.0]))  # 3 of 4.0.
    with tf.compat.v1.Session() as sess:
      # max(0.25 * 24, 0.5 * 16) + 12, times weight_decay / 2.
      assert sess.run(decay.loss(2.0)) == pytest.approx(8.0 + 12.0)
      assert sess.run(MaskedWeightDecay().loss(2.0)) == 0.0


def test_snapshots_are_read_once_and_survive_an_update():
  with tf.Graph().as_default():
    snapshots = {}
    with reading_snapshots(snapshots), tf.compat.v1.variable_scope(
        's', reuse=tf.compat.v1.AUTO_REUSE):
      w1 = tf.compat.v1.get_variable('w', initializer=tf.constant(1.0))
      w2 = tf.compat.v1.get_variable('w', initializer=tf.constant(1.0))
    variable, = tf.compat.v1.global_variables()
    assert w1 is w2 and list(snapshots) == ['s/w']
    # The gradient flows through the read to the variable.
    grad, = tf.gradients(3.0 * w1, [variable])
    # An update ordered after the read does not change what the read holds:
    # a pass using the snapshot sees the value from before the update.
    with tf.control_dependencies([w1]):
      update = variable.assign_add(10.0)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      before, _, g = sess.run([w1 * 2.0, update, grad])
      assert (before, g) == (2.0, 3.0)
      assert sess.run(variable) == 11.0


def test_decay_terms_of_unused_kernels_can_be_dead():
  # The deferred form's decay: the same loss, the same gradient for every
  # kernel the architecture uses, and a dead one (nothing computed) for each
  # kernel it leaves unused, which the deferred update does not step.
  with tf.Graph().as_default():
    snapshots, uses, decay = {}, WeightUses(), MaskedWeightDecay()
    masks = [tf.compat.v1.placeholder_with_default(m, m.shape)
             for m in _masks(warmup=False)]
    with reading_snapshots(snapshots):
      build_network(schema.with_masks(tiny.tiny_spec(), masks),
                    tf.zeros([2, 28, 28, 1]), 10, forms.deferred('masked'),
                    decay=decay, uses=uses)
    once = uses.used_once()
    kernels = [v for v in tf.compat.v1.trainable_variables()
               if v.op.name in SAMPLED]
    plain = decay.loss(WEIGHT_DECAY)
    dead = decay.loss(WEIGHT_DECAY, once)
    plain_grads = tf.gradients(plain, kernels)
    with dead_gradients.dead_when_unused([snapshots[n] for n in once]):
      dead_grads = tf.gradients(dead, kernels)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      want, got = sess.run([plain, dead])
      assert got == pytest.approx(want, rel=1e-6)
      unused = []
      for var, want, got in zip(kernels, plain_grads, dead_grads):
        name = var.op.name
        if SAMPLED[name][0] > 0:
          np.testing.assert_allclose(*sess.run([got, want]), rtol=1e-6,
                                     err_msg=name)
          continue
        assert name in once
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match='does not have value'):
          sess.run(got)
        unused.append(name)
      assert len(unused) == 2


def test_weights_reused_inside_choices_are_listed():
  # Such a weight cannot have a dead gradient (`build_network` refuses it).
  with tf.Graph().as_default():
    first, second = tf.constant(1.0), tf.constant(0.0)
    uses = WeightUses()
    for name, scale in (('alone', first), ('twice_in_one', second),
                        ('twice_in_one', second), ('two_choices', first),
                        ('two_choices', second), ('and_outside', first),
                        ('and_outside', None), ('outside', None),
                        ('outside', None)):
      uses.add(name, scale)
    assert uses.reused_inside_choices() == [
        'twice_in_one', 'two_choices', 'and_outside']
    assert uses.used_once() == ['alone']
