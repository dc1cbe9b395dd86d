"""Tests of build_network on every registered space (supernet and stand-alone)."""

import dataclasses
from typing import Any, Dict, List

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import Block, Conv, ConvTower
from tunas_search.supernet import build_network
from tunas_search.supernet import builder
from tunas_search.supernet import forms
from tunas_search.supernet import supernet_init_op
from tunas_search.supernet import WeightUses
from tunas_search.tf_internals import graph as tf_graph


IMAGE_SIZE = 32
BATCH = 2
NUM_CLASSES = 10
# Spaces sharing a spec function share one supernet graph; the enlarged
# ProxylessNAS family adds nothing the MobileNetV3-like space does not test
# (searched widths), so its graph is only built in the slow run.
# Likewise the MobileNetV4 one-stage space holds every coarse and fine
# architecture (the same layers and decisions), and Conv-S has every layer
# kind of Conv-M and Conv-L.
_SLOW_SPECS = ('proxylessnas_enlarged_search', 'mobilenet_v4_conv_small_coarse',
               'mobilenet_v4_conv_small_fine', 'mobilenet_v4_conv_medium',
               'mobilenet_v4_conv_large')
# Grappler's graph rewrites take longer than the few steps a test runs.
_FAST_START = tf.compat.v1.ConfigProto()
_FAST_START.graph_options.rewrite_options.disable_meta_optimizer = True


@dataclasses.dataclass
class Supernet:
  """A supernet graph with one placeholder mask per decision."""
  graph: tf.Graph
  session: tf.compat.v1.Session
  decisions: List[schema.Decision]
  masks: List[tf.Tensor]
  images: tf.Tensor
  logits: tf.Tensor
  grads: Dict[str, tf.Tensor]
  variables: List[tf.Variable]

  def feed(self, masks: List[np.ndarray], images: np.ndarray) -> Dict:
    return {**dict(zip(self.masks, masks)), self.images: images}


def _images(seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).normal(
      size=(BATCH, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)


def _build_supernet(spec) -> Supernet:
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)  # Reproducible initial weights.
    decisions = schema.decisions(spec)
    masks = [tf.compat.v1.placeholder(tf.float32, [d.num_choices])
             for d in decisions]
    images = tf.compat.v1.placeholder(
        tf.float32, [None, IMAGE_SIZE, IMAGE_SIZE, 3])
    logits = build_network(schema.with_masks(spec, masks), images,
                           NUM_CLASSES, forms.every_step('masked'))
    # A random projection: sum(logits) has zero gradient through batch BN.
    weights = np.random.default_rng(1).normal(size=(NUM_CLASSES,))
    loss = tf.reduce_sum(logits * weights.astype(np.float32))
    variables = tf.compat.v1.trainable_variables()
    grads = tf.gradients(loss, variables)
    session = tf.compat.v1.Session(graph=graph, config=_FAST_START)
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(_randomize_batch_norm(variables))
  return Supernet(graph, session, decisions, masks, images, logits,
                  {v.op.name: g for v, g in zip(variables, grads)}, variables)


def _randomize_batch_norm(variables) -> tf.Operation:
  """Non-trivial gamma and beta, so wrongly masked channels would show."""
  rng = np.random.default_rng(2)
  assigns = []
  for v in variables:
    shape = v.shape.as_list()
    if v.op.name.endswith('/gamma'):
      assigns.append(v.assign(rng.uniform(0.5, 1.5, shape).astype('f4')))
    elif v.op.name.endswith('/beta'):
      assigns.append(v.assign(rng.normal(0, 0.1, shape).astype('f4')))
  return tf.group(*assigns)


@pytest.fixture(scope='module')
def supernets():
  """Supernet graphs by spec-function name, built on first use."""
  cache: Dict[str, Supernet] = {}

  def get(name: str) -> Supernet:
    key = search_spaces.get(name).spec_fn.__name__
    if key not in cache:
      cache[key] = _build_supernet(search_spaces.get(name).spec())
    return cache[key]
  yield get
  for net in cache.values():
    net.session.close()


def _one_hot(decisions, indices) -> List[np.ndarray]:
  return [np.eye(d.num_choices, dtype=np.float32)[i]
          for d, i in zip(decisions, indices)]


def _params():
  out = []
  for name in search_spaces.names():
    key = search_spaces.get(name).spec_fn.__name__
    marks = [pytest.mark.slow] if key in _SLOW_SPECS else []
    out.append(pytest.param(name, marks=marks))
  return out


# Kernel-size fields -> the scope prefix of their depthwise kernels.
_KERNEL_SCOPES = {'kernel_size': 'depthwise_k',
                  'middle_kernel_size': 'depthwise_k',
                  'start_kernel_size': 'start_depthwise_k'}


@pytest.mark.parametrize('name', _params())
def test_forward_backward_random_architecture(supernets, name):
  net = supernets(name)
  space = search_spaces.get(name)
  rng = np.random.default_rng(3)
  indices = (space.default_indices() if space.is_reference else
             architecture.random_indices(space.spec(), rng))
  names = list(net.grads)
  logits, *grads = net.session.run(
      [net.logits] + [net.grads[n] for n in names],
      net.feed(_one_hot(net.decisions, indices), _images()))
  assert logits.shape == (BATCH, NUM_CLASSES)
  assert np.all(np.isfinite(logits)) and np.std(logits) > 0
  grads = dict(zip(names, grads))
  assert all(np.all(np.isfinite(g)) for g in grads.values())
  assert np.abs(grads['classifier/kernel']).sum() > 0
  # Gradients reach only the selected kernel size of a searched layer (a
  # UIB's kernel 0 is no depthwise conv).
  checked = 0
  for d, i in zip(net.decisions, indices):
    layer, field = d.path.rsplit('/', 1)
    scope = f'{layer}/{_KERNEL_SCOPES.get(field)}'
    if (f'{scope}3/kernel' in grads and d.num_choices > 1
        and all(indices[p] == c for p, c in d.parents)):
      for j, k in enumerate(d.oneof.choices):
        if k:
          kernel = grads[f'{scope}{k}/kernel']
          assert (np.abs(kernel).sum() > 0) == (i == j), (d.path, k)
      checked += 1
  # A coarse MobileNetV4 space searches widths and depths only.
  assert checked > 0 or space.is_reference or name.endswith('_coarse')


def _all_ops_on_masks(decisions) -> List[np.ndarray]:
  """Op warm-up everywhere: every op on (outputs averaged), widest filters."""
  masks = []
  for d in decisions:
    if d.tag == schema.OP:
      masks.append(np.full(d.num_choices, 1 / d.num_choices, np.float32))
    else:  # By value, as the controller's filter warm-up picks it.
      masks.append(np.eye(d.num_choices, dtype=np.float32)[
          architecture.widest_index(d)])
  return masks


def _search_space_params():
  return [p for p in _params()
          if p.values[0] in search_spaces.search_space_names()]


@pytest.mark.parametrize('name', _search_space_params())
def test_all_ops_on_every_variable_gets_gradient(supernets, name):
  net = supernets(name)
  assert 'classifier/kernel' in net.grads
  missing = sorted(n for n, g in net.grads.items() if g is None)
  assert not missing, f'{name}: no gradient path to {missing[:5]}'
  names = list(net.grads)
  grads = net.session.run([net.grads[n] for n in names],
                          net.feed(_all_ops_on_masks(net.decisions),
                                   _images()))
  zero = sorted(n for n, g in zip(names, grads) if not np.any(g != 0))
  assert not zero, f'{name}: all-zero gradient for {zero[:5]}'
  assert all(np.all(np.isfinite(g)) for g in grads)


def _standalone_logits(spec, indices, values: Dict[str, np.ndarray],
                       images: np.ndarray) -> np.ndarray:
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)  # Reproducible initial weights.
    logits = build_network(architecture.with_indices(spec, indices),
                           tf.constant(images), NUM_CLASSES,
                           forms.standalone(is_training=True))
    init = supernet_init_op(values)
    with tf.compat.v1.Session(graph=graph, config=_FAST_START) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(init)
      return session.run(logits)


@pytest.mark.parametrize('name', ['proxylessnas_mobile', 'mobilenet_v3_large'])
@pytest.mark.float_paths
def test_supernet_and_standalone_agree(supernets, name):
  net = supernets(name)
  space = search_spaces.get(name)
  indices = space.default_indices()
  # Batch 8: at 32x32 the last stages are 1x1, and batch-2 BN (two values per
  # channel) amplifies float rounding up to 1/sqrt(eps) ~ 30x per layer.
  images = np.random.default_rng(4).normal(
      size=(8, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
  with net.graph.as_default():
    values = dict(zip([v.op.name for v in net.variables],
                      net.session.run(net.variables)))
  supernet_logits = net.session.run(
      net.logits, net.feed(_one_hot(net.decisions, indices), images))
  standalone = _standalone_logits(space.spec(), indices, values, images)
  np.testing.assert_allclose(standalone, supernet_logits, atol=1e-4)
  assert np.abs(supernet_logits).max() > 1e-3


def test_mobilenet_v2_parameter_count():
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)  # Reproducible initial weights.
    space = search_spaces.get('mobilenet_v2')
    spec = architecture.with_indices(space.spec(), space.default_indices())
    images = tf.compat.v1.placeholder(tf.float32, [1, 224, 224, 3])
    logits = build_network(spec, images, 1000,
                           forms.standalone(is_training=False))
    count = sum(int(np.prod(v.shape)) for v in
                tf.compat.v1.trainable_variables())
  assert logits.shape.as_list() == [1, 1000]
  # tf.keras.applications.MobileNetV2(weights=None, classes=1000).
  assert count == 3_504_872


def test_stand_alone_variables_have_selected_widths():
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)  # Reproducible initial weights.
    space = search_spaces.get('mobilenet_v2')
    spec = architecture.with_indices(space.spec(), space.default_indices())
    build_network(spec, tf.zeros([1, 32, 32, 3]), 10,
                  forms.standalone(is_training=False))
    shapes: Dict[str, Any] = {v.op.name: v.shape.as_list()
                              for v in tf.compat.v1.global_variables()}
  # Block 2, first layer: 16 -> x6 = 96 expanded, kernel 3, 24 out.
  prefix = 'blocks/2/layers/0/choices/0'
  assert shapes[f'{prefix}/expand/kernel'] == [1, 1, 16, 96]
  assert shapes[f'{prefix}/depthwise_k3/kernel'] == [3, 3, 96, 1]
  assert shapes[f'{prefix}/depthwise_bn_k3/moving_mean'] == [96]
  assert shapes[f'{prefix}/project/kernel'] == [1, 1, 96, 24]
  assert f'{prefix}/depthwise_k5/kernel' not in shapes
  assert shapes['classifier/kernel'] == [1280, 10]


def _cond_op_types(form, **kwargs):
  with tf.Graph().as_default() as graph:
    spec = schema.with_masks(_xla_spec(), [tf.constant([0.5, 0.5])])
    build_network(spec, tf.zeros([2, 8, 8, 1]), 3, form, **kwargs)
  return {op.type for op in graph.get_operations()}


def _xla_spec():
  return ConvTower((Block((OneOf((Conv(3), Conv(5)), schema.OP),), 8),))


def test_the_xla_form_builds_functional_conds():
  before = tf.compat.v1.control_flow_v2_enabled()
  assert 'Switch' in _cond_op_types(forms.every_step('masked'))
  types = _cond_op_types(forms.xla())
  assert 'Switch' not in types and types & {'If', 'StatelessIf'}
  # The toggle is restored after each build.
  assert tf.compat.v1.control_flow_v2_enabled() == before


def _has_conds(form, **kwargs) -> bool:
  """Whether a supernet build has any op inside a v1 cond."""
  with tf.Graph().as_default() as graph:
    spec = schema.with_masks(_xla_spec(), [tf.constant([0.5, 0.5])])
    build_network(spec, tf.zeros([2, 8, 8, 1]), 3, form, **kwargs)
  return any(tf_graph.in_control_flow(op) for op in graph.get_operations())


def test_only_the_every_step_form_has_conds():
  # TuNAS's every-step update needs zero gradients for unused weights
  # (conds); the deferred update's build and one no gradient is taken
  # through (the validation pass) need none.
  assert _has_conds(forms.every_step('masked'))
  assert _has_conds(forms.every_step('sampled'))
  assert not _has_conds(forms.deferred('masked'), uses=WeightUses())
  assert not _has_conds(forms.validation('sampled'))
  assert not _has_conds(forms.xla())  # Functional.


def test_the_deferred_form_needs_uses():
  with tf.Graph().as_default(), pytest.raises(
      ValueError, match=r'the deferred form records the weights it uses: '
      r'pass uses=WeightUses\(\)'):
    build_network(schema.with_masks(_xla_spec(), [tf.constant([0.5, 0.5])]),
                  tf.zeros([2, 8, 8, 1]), 3, forms.deferred('masked'))


@pytest.mark.parametrize('make, message', [
    (lambda: forms.every_step('narrow'), "unknown width_form 'narrow'"),
    (lambda: forms.standalone(True, dropout_rate=1.0),
     r'dropout rates must be in \[0, 1\)'),
    (lambda: forms.standalone(True, batch_norm_mode='frozen'),
     "unknown batch_norm_mode 'frozen'"),
])
def test_a_bad_form_is_refused(make, message):
  with pytest.raises(ValueError, match=message):
    make()


def test_a_deferred_build_refuses_unrecorded_or_reused_weights():
  # Its recorded names are spec paths; inside a variable scope no weight
  # matches, and dead gradients would skip updates the optimiser expects.
  with tf.Graph().as_default():
    spec = schema.with_masks(_xla_spec(), [tf.constant([1.0, 0.0])])
    with tf.compat.v1.variable_scope('outer'):
      with pytest.raises(ValueError, match=r'not recorded: .*outer/blocks'):
        build_network(spec, tf.zeros([2, 8, 8, 1]), 3,
                      forms.deferred('masked'), uses=WeightUses())
    # Outside, the same build is accepted.
    build_network(spec, tf.zeros([2, 8, 8, 1]), 3, forms.deferred('masked'),
                  uses=WeightUses())
    # A weight two choices share is refused by name.
    uses = WeightUses()
    uses.add('w', tf.constant(1.0))
    uses.add('w', tf.constant(0.0))
    with pytest.raises(ValueError, match=r"used more than once: \['w'\]"):
      builder._check_dead_gradients(uses, {'w'})  # pylint: disable=protected-access
