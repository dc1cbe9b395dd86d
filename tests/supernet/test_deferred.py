"""Deferred RMSProp steps of unused weights against TuNAS's every-step update.

The deferred form must give the weights TensorFlow's RMSProp gives when it
steps every weight every step (docs/method.md, "Deferred steps of unused
weights"): the closed form of k zero-gradient steps against the kernel
itself, and a whole search run in both forms, step by step.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.search import test_model_fn_barrier as test_search_barrier
from tests.e2e import tiny
from tunas_search import config as config_lib
from tunas_search.search import model_fn as search
from tunas_search import supernet as supernet_lib
from tunas_search.config import plan as plan_lib
from tunas_search.supernet import deferred
from tunas_search.tf_internals import dead_gradients

tf1 = tf.compat.v1

MOMENTUM = 0.9
DECAY = 0.9
STEPS = 14


@pytest.mark.parametrize('momentum', [0.0, 0.5, 0.9])
@pytest.mark.float_paths
def test_closed_form_matches_zero_gradient_steps(momentum):
  rng = np.random.RandomState(0)
  with tf.Graph().as_default(), tf1.Session() as sess:
    var = tf1.get_variable('w', initializer=rng.randn(5).astype(np.float32))
    grad = tf1.placeholder(tf.float32, [5])
    optimizer = tf1.train.RMSPropOptimizer(0.1, decay=DECAY,
                                           momentum=momentum, epsilon=1.0)
    update = optimizer.apply_gradients([(grad, var)])
    ms, mom = optimizer.get_slot(var, 'rms'), optimizer.get_slot(var,
                                                                  'momentum')
    sess.run(tf1.global_variables_initializer())
    sess.run(update, {grad: rng.randn(5)})
    start = sess.run([var, ms, mom])
    for _ in range(7):
      sess.run(update, {grad: np.zeros(5)})
    end = sess.run([var, ms, mom])
  ms_f, mom_f, shift = deferred.idle_factors(7, momentum, DECAY)
  np.testing.assert_allclose(end[0], start[0] - start[2] * shift, rtol=1e-6,
                             atol=1e-6)
  np.testing.assert_allclose(end[1], start[1] * ms_f, rtol=1e-6)
  np.testing.assert_allclose(end[2], start[2] * mom_f, rtol=1e-6)


def test_closed_form_of_no_missed_step_is_the_identity():
  ms_f, mom_f, shift = deferred.idle_factors(0, MOMENTUM, DECAY)
  assert (ms_f, mom_f, shift) == (1, 1, 0)


def _run(tmp_path, mode: str, validation_weights: str, nan_step=None,
         widths: str = 'auto'):
  """Runs STEPS search steps; returns per-step weights and current_to.

  At `nan_step` the training images are NaN, so that step's gradients are.
  """
  config = tiny.tiny_config(
      tmp_path, unused_weight_steps=mode, max_steps=100,
      validation_weights=validation_weights, supernet_widths=widths,
      # A reward that cannot differ between the forms by a rounding flip of
      # one validation prediction, so both sample the same architectures.
      constant_validation_accuracy=0.5,
      increase_ops_warmup_steps_fraction=0.0,
      increase_filters_warmup_steps_fraction=0.0)
  rng = np.random.RandomState(1)
  with tf.Graph().as_default():
    tf1.set_random_seed(0)  # The same initial weights in both forms.
    train_images = tf1.placeholder_with_default(
        rng.rand(4, 28, 28, 1).astype(np.float32), [4, 28, 28, 1])
    features = {
        'train_images': train_images,
        'validation_images': tf.constant(rng.rand(16, 28, 28, 1), tf.float32)}
    labels = {'train_labels': tf.constant(rng.randint(10, size=4)),
              'validation_labels': tf.constant(rng.randint(10, size=16))}
    plan = plan_lib.resolve(config)
    spec = search.make_model_fn(config, plan, tiny.tiny_spec())(
        features, labels, tf.estimator.ModeKeys.TRAIN, {})
    indices = tf1.get_collection(search.SAMPLED_INDICES)[0]
    weights = search.model_variables()
    saver = tf1.train.Saver()
    history, sampled, current = [], [], []
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for step in range(STEPS):
        feed = ({train_images: np.full([4, 28, 28, 1], np.nan, np.float32)}
                if step == nan_step else None)
        _, loss, chosen = sess.run([spec.train_op, spec.loss, indices], feed)
        assert np.isnan(loss) == (step == nan_step)
        sampled.append(chosen.tolist())
        path = saver.save(sess, str(tmp_path / 'ckpt'), global_step=step + 1,
                          write_meta_graph=False)
        reader = tf.train.load_checkpoint(path)
        values = {v.op.name: reader.get_tensor(v.op.name) for v in weights}
        history.append(deferred.caught_up(values, reader, step + 1,
                                          MOMENTUM, DECAY))
        if reader.has_tensor(deferred.CURRENT_TO):
          current.append(reader.get_tensor(deferred.CURRENT_TO))
  return history, sampled, current


# The run with a NaN step at 6 checks every step's weights of the same
# settings as the first case on its 13 finite steps, and the NaN step too;
# `make test` runs it and leaves the first to `make test-all`
# (docs/testing.md).
@pytest.mark.parametrize('validation_weights, nan_step, widths', [
    pytest.param('pre_update', None, 'auto', marks=pytest.mark.slow),
    ('post_update', None, 'auto'), ('pre_update', 6, 'auto'),
    ('pre_update', None, 'masked')])
@pytest.mark.float_paths
def test_deferred_steps_give_every_step_weights(tmp_path, validation_weights,
                                                nan_step, widths):
  # The deferred form's gradients of unused weights are dead, not zero
  # (`dead_gradients`); 'auto' computes at the sampled widths on a CPU, so
  # those gradients pass a slice there.
  every, every_arch, _ = _run(tmp_path / 'every', 'every_step',
                              validation_weights, nan_step, widths)
  lazy, lazy_arch, current = _run(tmp_path / 'lazy', 'deferred',
                                  validation_weights, nan_step, widths)
  assert lazy_arch == every_arch
  # The run must exercise the deferral: at some checkpoint a weight is
  # behind the step, and later a weight catches up two or more missed steps.
  behind = [i for i, c in enumerate(current) if c.min() < i + 1]
  assert behind, 'no weight was ever unused'
  jumps = [int((b - a).max()) for a, b in zip(current, current[1:])]
  assert max(jumps) >= 3, current
  if nan_step is not None:  # No weight was updated in the NaN step.
    assert current[nan_step].max() <= nan_step
  for step, (want, got) in enumerate(zip(every, lazy)):
    assert sorted(want) == sorted(got)
    for name in want:
      np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6,
                                 err_msg=f'{name} after step {step + 1}')


def test_reads_and_updates_of_deferred_weights_wait_for_their_catch_up(
    tmp_path):
  config = tiny.tiny_config(tmp_path, unused_weight_steps='deferred')
  with tf.Graph().as_default() as graph:
    features = {'train_images': tf.zeros([4, 28, 28, 1]),
                'validation_images': tf.zeros([16, 28, 28, 1])}
    labels = {'train_labels': tf.zeros([4], tf.int32),
              'validation_labels': tf.zeros([16], tf.int32)}
    plan = plan_lib.resolve(config)
    search.make_model_fn(config, plan, tiny.tiny_spec())(
        features, labels, tf.estimator.ModeKeys.TRAIN, {})
    names_var, = [v for v in tf1.global_variables()
                  if v.op.name == deferred.NAMES]
    with tf1.Session() as sess:
      sess.run(names_var.initializer)
      names = {n.decode() for n in sess.run(names_var)}
  # Every weight is in the checkpoint's list: those of op choices (kernel
  # sizes, the skippable layer) and those every architecture uses, which
  # miss the steps whose gradients were not finite.
  assert {'blocks/1/layers/0/depthwise_k5/kernel',
          'blocks/1/layers/1/layer/choices/0/expand/kernel',
          'blocks/1/layers/0/expand/kernel', 'classifier/kernel'} <= names
  handles = {v.handle.op.name: v.op.name
             for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)}
  # The top-level reads of each weight that the step uses (the snapshots):
  # a read inside a cond takes the handle through a Switch instead.
  deferred_reads = [op for op in graph.get_operations()
                    if op.type == 'ReadVariableOp'
                    and handles.get(op.inputs[0].op.name) in names
                    and op.outputs[0].consumers()]
  assert len(deferred_reads) >= len(names)
  for op in deferred_reads:
    waits = [c.name for c in op.control_inputs]
    assert any(n.startswith(deferred.CATCH_UP) for n in waits), (op.name,
                                                                  waits)
  # Each group's update: a call of a function that applies RMSProp.
  updates = [op for op in test_search_barrier._updates(graph)  # pylint: disable=protected-access
             if op.name.startswith(deferred.UPDATE)]
  assert updates
  for op in updates:
    waits = test_search_barrier._ancestors(op)  # pylint: disable=protected-access
    assert any(n.startswith(deferred.CATCH_UP) for n in waits)


def test_a_step_runs_the_catch_up_and_update_of_the_groups_it_uses_alone():
  # Two groups of two weights (one op choice each) and one weight that every
  # architecture uses.
  with tf.Graph().as_default() as graph:
    scales = [tf1.placeholder(tf.float32, []) for _ in range(2)]
    uses = supernet_lib.WeightUses()
    variables, snapshots, loss = [], {}, 0.0
    for name, scale in (('a0', scales[0]), ('a1', scales[0]),
                        ('b0', scales[1]), ('b1', scales[1]), ('c', None)):
      var = tf1.get_variable(name, initializer=np.ones(3, np.float32))
      uses.add(name, scale)
      snapshots[name] = var.read_value()
      variables.append(var)
      term = tf.reduce_sum(snapshots[name] ** 2)
      loss += term if scale is None else scale * term
    step = tf1.train.get_or_create_global_step()
    optimizer = deferred.DeferredRMSProp(
        variables, uses, snapshots, step.read_value(), tf.constant(0.1),
        decay=DECAY, momentum=MOMENTUM, epsilon=1.0)
    grads = optimizer.gradients(loss, variables)
    with tf.control_dependencies([optimizer.apply_gradients(
        list(zip(grads, variables)), tf.constant(True))]):
      train_op = step.assign_add(1)
    # The ops that move a weight: its catch-up's, its update's.
    moves = {op.name: f'{kind} {op.inputs[0].op.name}'
             for op in graph.get_operations()
             for kind, op_type in (('catch_up', 'AssignSubVariableOp'),
                                   ('update', 'ResourceApplyRMSProp'))
             if op.type == op_type}

    def ran(sess, a, b):
      metadata = tf1.RunMetadata()
      sess.run(train_op, {scales[0]: a, scales[1]: b},
               options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
               run_metadata=metadata)
      return sorted(moves[n.node_name] for dev in metadata.step_stats.dev_stats
                    for n in dev.node_stats if n.node_name in moves)

    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      # Only choice a: its group and the common weight are updated.
      assert ran(sess, 1.0, 0.0) == ['update a0', 'update a1', 'update c']
      first = dict(zip('a0 a1 b0 b1 c'.split(), sess.run(variables)))
      # Then only choice b, which missed one step: its catch-up runs first.
      assert ran(sess, 0.0, 1.0) == ['catch_up b0', 'catch_up b1',
                                     'update b0', 'update b1', 'update c']
      second = dict(zip('a0 a1 b0 b1 c'.split(), sess.run(variables)))
  # Each group moved exactly its weights: b stood still in step 1, a (whose
  # missed step waits for its next use) in step 2, c moved in both.
  for name in ('a0', 'a1', 'c'):
    assert np.all(first[name] < 1.0), (name, first[name])
  for name in ('b0', 'b1'):
    np.testing.assert_array_equal(first[name], np.ones(3, np.float32))
    assert np.all(second[name] < 1.0), (name, second[name])
  for name in ('a0', 'a1'):
    np.testing.assert_array_equal(second[name], first[name])
  assert np.all(second['c'] < first['c'])


def test_gradient_norms_are_per_group_and_zero_when_unused():
  # Choice a's group (two weights), choice b's (one) and a weight every
  # architecture uses; loss = sum over weights of scale * sum(w ** 2), so a
  # used group's half squared norm is 0.5 * sum((2 * scale * w) ** 2). As in
  # the supernet, a choice's weights are routed: dead where it is unused.
  with tf.Graph().as_default() as graph:
    scales = [tf1.placeholder(tf.float32, []) for _ in range(2)]
    uses = supernet_lib.WeightUses()
    variables, snapshots, loss = [], {}, 0.0
    for name, scale, value in (('a0', scales[0], 1.0), ('a1', scales[0], 2.0),
                               ('b0', scales[1], 3.0), ('c', None, 4.0)):
      var = tf1.get_variable(name, initializer=np.full(3, value, np.float32))
      uses.add(name, scale)
      snapshots[name] = var.read_value()
      variables.append(var)
      if scale is None:
        loss += tf.reduce_sum(snapshots[name] ** 2)
      else:
        used = tf.not_equal(scale, 0.0)
        w = dead_gradients.route(snapshots[name], used)
        loss += dead_gradients.or_zero(scale * tf.reduce_sum(w ** 2), used)
    step = tf1.train.get_or_create_global_step()
    optimizer = deferred.DeferredRMSProp(
        variables, uses, snapshots, step.read_value(), tf.constant(0.1),
        decay=DECAY, momentum=MOMENTUM, epsilon=1.0)
    grads = optimizer.gradients(loss, variables)
    norms = optimizer.gradient_norms(list(zip(grads, variables)))
    # The norm's term of each weight's gradient.
    terms = {op.name: op.inputs[0].name for op in graph.get_operations()
             if op.type == 'L2Loss'}
    by_weight = {g.name: v.op.name for g, v in zip(grads, variables)}
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      metadata = tf1.RunMetadata()
      got = sess.run(norms, {scales[0]: 1.0, scales[1]: 0.0},
                     options=tf1.RunOptions(
                         trace_level=tf1.RunOptions.FULL_TRACE),
                     run_metadata=metadata)
      ran = sorted(by_weight[terms[n.node_name]]
                   for dev in metadata.step_stats.dev_stats
                   for n in dev.node_stats if n.node_name in terms)
      # a: 0.5 * 3 * (2**2 + 4**2); b unused: 0 without computing its term;
      # c: 0.5 * 3 * 8**2.
      np.testing.assert_allclose(got, [30.0, 0.0, 96.0])
      assert ran == ['a0', 'a1', 'c'], ran
      np.testing.assert_allclose(
          sess.run(norms, {scales[0]: 0.0, scales[1]: 0.5}),
          [0.0, 0.5 * 3 * 3.0 ** 2, 96.0])


def test_caught_up_leaves_a_checkpoint_without_deferral_alone(tmp_path):
  with tf.Graph().as_default(), tf1.Session() as sess:
    var = tf1.get_variable('w', initializer=np.ones(3, np.float32))
    sess.run(var.initializer)
    path = tf1.train.Saver([var]).save(sess, str(tmp_path / 'c'))
  values = {'w': np.ones(3, np.float32)}
  out = deferred.caught_up(values, tf.train.load_checkpoint(path), 5,
                           MOMENTUM, DECAY)
  np.testing.assert_array_equal(out['w'], values['w'])


def test_auto_is_the_default_and_defers_where_it_can(tmp_path):
  config = tiny.tiny_config(tmp_path)
  assert config.unused_weight_steps == 'auto'
  assert plan_lib.resolve(config).shared_update == 'deferred'
  for overrides in ({'use_tpu': True, 'tpu': 'my-tpu'},
                    {'num_replicas': 2, 'multi_worker': True},
                    {'num_replicas': 2}):
    other = tiny.tiny_config(tmp_path, **overrides)
    assert plan_lib.resolve(other).shared_update == 'every_step', overrides
  for update in ('every_step', 'deferred'):
    assert plan_lib.resolve(tiny.tiny_config(
        tmp_path, unused_weight_steps=update)).shared_update == update


@pytest.mark.parametrize('overrides', [
    {'use_tpu': True, 'tpu': 'my-tpu'},
    {'num_replicas': 2, 'multi_worker': True},
])
def test_deferred_with_several_replicas_or_on_tpu_is_refused(tmp_path,
                                                             overrides):
  with pytest.raises(config_lib.ConfigError,
                     match='unused_weight_steps=deferred needs one replica'):
    tiny.tiny_config(tmp_path, unused_weight_steps='deferred', **overrides)


def test_an_unknown_value_is_refused_naming_the_choices(tmp_path):
  with pytest.raises(config_lib.ConfigError,
                     match="unknown unused_weight_steps 'lazy'; valid "
                     'choices: auto, every_step, deferred'):
    tiny.tiny_config(tmp_path, unused_weight_steps='lazy')
