"""`shared_update`: the update and the training pass's form the plan names,
and its two calls, values in and out (their values are compared step by step
in tests/supernet/test_deferred.py and tests/e2e/test_xla.py)."""

import numpy as np
import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.search import shared_update
from tunas_search.space import schema
from tunas_search.config import plan as plan_lib
from tunas_search.config import SearchConfig
from tunas_search.supernet import forms

tf1 = tf.compat.v1


def _config(**overrides) -> SearchConfig:
  values = dict(search_space='tiny', model_dir='/unused', num_classes=10,
                num_train_examples=1000, image_size=28, input_channels=1,
                train_batch_size=4, rl_cost_model_target=1e5,
                cost_model='madds')
  values.update(overrides)
  return SearchConfig(**values)


@pytest.mark.parametrize('overrides, environment, kind, form', [
    (dict(), plan_lib.Environment(), shared_update.DeferredUpdate,
     forms.deferred('sampled')),
    (dict(unused_weight_steps='deferred'), plan_lib.Environment(),
     shared_update.DeferredUpdate, forms.deferred('sampled')),
    (dict(supernet_widths='masked', unused_weight_steps='deferred'),
     plan_lib.Environment(), shared_update.DeferredUpdate,
     forms.deferred('masked')),
    (dict(unused_weight_steps='every_step'), plan_lib.Environment(),
     shared_update.EveryStepUpdate, forms.every_step('sampled')),
    (dict(), plan_lib.Environment(xla=True), shared_update.EveryStepUpdate,
     forms.xla()),
])
def test_the_plan_picks_the_update_and_its_form(overrides, environment, kind,
                                                form):
  config = _config(**overrides)
  update = shared_update.for_plan(config, plan_lib.resolve(config,
                                                           environment))
  assert type(update) is kind  # pylint: disable=unidiomatic-typecheck
  assert update.form == form


def _forward(config: SearchConfig):
  """The training pass of `config`'s update on the tiny space, uniform masks."""
  spec = tiny.tiny_spec()
  masks = [tf.fill([d.num_choices], 1.0 / d.num_choices)
           for d in schema.decisions(spec)]
  update = shared_update.for_plan(config, plan_lib.resolve(config))
  return update.forward(schema.with_masks(spec, masks),
                        tf.zeros([2, 28, 28, 1]))


@pytest.mark.parametrize('unused_weight_steps, validation_weights, reads', [
    ('every_step', 'pre_update', True), ('every_step', 'post_update', False),
    ('deferred', 'pre_update', True),
    # Its catch-ups are ordered before the training pass's reads, which must
    # be one read per weight even when validation reads the variables.
    ('deferred', 'post_update', True)])
def test_the_forward_pass_returns_its_reads_and_uses(
    unused_weight_steps, validation_weights, reads):
  config = _config(unused_weight_steps=unused_weight_steps,
                   validation_weights=validation_weights)
  with tf.Graph().as_default():
    forward = _forward(config)
    weights = {v.op.name for v in tf1.trainable_variables()}
    assert forward.logits.shape.as_list() == [2, config.num_classes]
    assert forward.regularization_loss.dtype == tf.float32
    # One read of every weight, or none: the pass reads the variables.
    assert set(forward.reads) == (weights if reads else set())
    # Only the deferred form records the weights' uses.
    assert (forward.uses is not None) == (unused_weight_steps == 'deferred')


@pytest.mark.parametrize('unused_weight_steps', ['every_step', 'deferred'])
def test_a_step_moves_the_weights_and_says_whether_it_was_finite(
    unused_weight_steps):
  config = _config(unused_weight_steps=unused_weight_steps)
  with tf.Graph().as_default():
    forward = _forward(config)
    empirical = tf.reduce_mean(tf.square(forward.logits - 1.0))
    loss = tf1.placeholder_with_default(
        empirical + forward.regularization_loss, [])
    variables = tf1.trainable_variables()
    update = shared_update.for_plan(config, plan_lib.resolve(config))
    train_op, finite = update.step(loss, empirical, forward, variables,
                                   tf.constant(0, tf.int64),
                                   tf.constant(0.1))
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      before = session.run(variables)
      assert session.run([train_op, finite])[1]
      after = session.run(variables)
      # The weights every architecture uses (stem, head) move.
      assert any((a != b).any() for a, b in zip(after, before))
      # A NaN empirical loss is not finite and moves no weight by NaN.
      _, ok = session.run([train_op, finite],
                          {empirical: float('nan')})
      assert not ok
      assert all(np.isfinite(v).all() for v in session.run(variables))
