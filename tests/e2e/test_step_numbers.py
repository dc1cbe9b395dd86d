"""The numbers one search step logs, checked against their formulas.

The real model_fn runs two steps on a fixed batch with the controller pinned
to one architecture (peaked logits, warm-up over), so every logged scalar can
be recomputed by hand: the learning rates and warm-up probabilities at the
step, the estimated cost (equal to `describe_arch`'s numpy cost), the reward,
the zero-debiased baseline and the advantage (docs/method.md, section 5).
"""

import math
import os
import sys
from typing import Dict, List

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tunas_search.space import architecture
from tunas_search.controller import policy as controller
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.search import model_fn as search
from tunas_search.search import step as step_lib
from tunas_search.config import plan as plan_lib
from tunas_search.runtime import host_call

sys.path.insert(0, os.path.dirname(__file__))
import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position

tf1 = tf.compat.v1
TOTAL = 100
START = 40  # After every warm-up (20 and 30 steps) and the RL delay (30).
PEAK = 30.0  # Logit margin: the pinned choice has probability 1 - ~1e-13.


def _run_steps(config, spec, indices: List[int], steps: int,
               monkeypatch, start: int = START) -> List[Dict[str, float]]:
  """Runs `steps` steps of the real model_fn; returns the logged scalars."""
  packed_names = []
  real_pack = host_call.pack_summaries

  def pack(scalars):
    names, packed = real_pack(scalars)
    packed_names.extend(names)
    return names, packed

  monkeypatch.setattr(search.host_call_lib, 'pack_summaries', pack)
  rng = np.random.default_rng(0)
  size, channels = config.image_size, config.input_channels
  b, v = config.train_batch_size, config.validation_batch_size
  with tf.Graph().as_default():
    tf1.set_random_seed(0)
    images = lambda n: tf.constant(  # pylint: disable=g-long-lambda
        rng.normal(size=(n, size, size, channels)), tf.float32)
    features = {'train_images': images(b), 'validation_images': images(v)}
    labels = {'train_labels': tf.constant(rng.integers(0, 10, b)),
              'validation_labels': tf.constant(rng.integers(0, 10, v))}
    plan = plan_lib.resolve(config)
    est = search.make_model_fn(config, plan, spec)(
        features, labels, tf.estimator.ModeKeys.TRAIN, {})
    _, (_, packed) = est.host_call
    decisions = schema.decisions(spec)
    variables = controller.create_logits(decisions, search.CONTROLLER_SCOPE)
    peaked = [np.eye(d.num_choices)[indices[d.index]] * PEAK
              for d in decisions]
    pin = [variables[n].assign(values) for n, values in
           controller.grouped_values(decisions, peaked).items()]
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      sess.run(pin + [tf1.train.get_global_step().assign(start)])
      logged = []
      for _ in range(steps):
        _, values = sess.run([est.train_op, packed])
        logged.append(dict(zip(packed_names, values[0].tolist())))
      return logged


def _config(tmp_path, **overrides):
  values = dict(max_steps=TOTAL, rl_delay_steps_fraction=0.3,
                increase_ops_warmup_steps_fraction=0.2,
                increase_filters_warmup_steps_fraction=0.3,
                rl_batch_size_multiplier=2.0, train_batch_size=8)
  values.update(overrides)
  return tiny.tiny_config(tmp_path, **values)


def _expected_learning_rates(config, step: int):
  warmup = config.fraction_steps(config.model_warmup_steps_fraction)
  progress = (step - warmup) / (TOTAL - warmup)
  model = config.scaled_model_learning_rate * 0.5 * (
      1 + math.cos(math.pi * progress))
  delay = config.fraction_steps(config.rl_delay_steps_fraction)
  rl = config.scaled_rl_learning_rate * 10 ** ((step - delay) / (TOTAL - delay))
  return model, rl


def _numpy_cost(config, spec, indices) -> float:
  """The cost `describe_arch` reports for the architecture."""
  context = cost_models.CostContext(
      config.effective_cost_model_space, config.image_size,
      config.num_classes, config.input_channels)
  return float(cost_models.get(config.cost_model).cost(spec, indices,
                                                       context))


# Stem 16, first bottleneck k5 e3, residual bottleneck on (k3 e1), width 8.
INDICES = [1, 1, 1, 0, 0, 0, 0]


@pytest.mark.float_paths
def test_logged_numbers_follow_their_formulas(tmp_path, monkeypatch):
  config = _config(tmp_path)
  spec = tiny.tiny_spec()
  first, second = _run_steps(config, spec, INDICES, 2, monkeypatch)
  cost = _numpy_cost(config, spec, INDICES)
  beta, target, momentum = -0.10, config.rl_cost_model_target, 0.95
  rewards = []
  for step, logged in ((START, first), (START + 1, second)):
    model_lr, rl_lr = _expected_learning_rates(config, step)
    # float32 schedules against float64: a few ulps.
    assert logged['model/learning_rate'] == pytest.approx(model_lr, rel=1e-5)
    assert logged['rlcontroller/learning_rate'] == pytest.approx(rl_lr,
                                                                 rel=1e-5)
    assert logged['rlcontroller/increase_ops_prob'] == 0.0
    assert logged['rlcontroller/increase_filters_prob'] == 0.0
    # The in-graph cost of the sampled masks equals the numpy cost.
    assert logged['rlcontroller/estimated_cost'] == pytest.approx(cost,
                                                                  rel=1e-6)
    accuracy = logged['rlcontroller/validation_accuracy']
    assert accuracy * config.validation_batch_size == pytest.approx(
        round(accuracy * config.validation_batch_size), abs=1e-4)
    reward = accuracy + beta * abs(cost / target - 1.0)
    assert logged['rlcontroller/reward'] == pytest.approx(reward, abs=1e-6)
    assert logged['rlcontroller/step_baseline'] == logged['rlcontroller/reward']
    rewards.append(logged['rlcontroller/reward'])
  # Zero-debiased EMA: the first estimate is the first reward, the second
  # (m (1 - m) r1 + (1 - m) r2) / (1 - m^2).
  baselines = [rewards[0], (momentum * (1 - momentum) * rewards[0] +
                            (1 - momentum) * rewards[1]) / (1 - momentum ** 2)]
  for logged, reward, baseline in zip((first, second), rewards, baselines):
    assert logged['rlcontroller/baseline'] == pytest.approx(baseline, abs=1e-6)
    advantage = reward - baseline
    assert logged['rlcontroller/advantage'] == pytest.approx(advantage,
                                                             abs=1e-6)
    # With the pinned choice certain, log_prob is ~0 and the loss with it.
    assert logged['rlcontroller/empirical_loss'] == pytest.approx(
        -advantage * logged['rlcontroller/log_prob'], abs=1e-9)
    assert logged['model/loss'] == pytest.approx(
        logged['model/empirical_loss'] + logged['model/regularization_loss'],
        rel=1e-6)


def test_warmup_probabilities_during_warmup(tmp_path, monkeypatch):
  config = _config(tmp_path)
  logged, = _run_steps(config, tiny.tiny_spec(), INDICES, 1, monkeypatch,
                       start=6)
  # Linear decay from 1 at step 0 to 0 at 20 (ops) and 30 (filters) steps.
  assert logged['rlcontroller/increase_ops_prob'] == pytest.approx(1 - 6 / 20)
  assert logged['rlcontroller/increase_filters_prob'] == pytest.approx(
      1 - 6 / 30)
  # Before the RL delay the controller does not learn.
  assert logged['rlcontroller/learning_rate'] == 0.0


# Builds a full space's supernet (~45 s). Its parts stay in `make test`:
# tests/cost_models/test_context_for.py (an unset cost_model_space scores in
# the search space), test_cost_models.py (pixel1's tf_cost equals its numpy
# cost on the real spaces) and test_logged_numbers_follow_their_formulas
# above (the step logs the tf_cost of its masks, equal to the numpy cost).
@pytest.mark.slow
def test_pixel1_cost_inside_the_real_step(tmp_path, monkeypatch):
  """The Pixel-1 latency model runs in the real model_fn of a real space,
  from a config that leaves `cost_model_space` unset (the config's rule
  picks the search space's own model)."""
  space = search_spaces.get('proxylessnas_search')
  spec = space.spec()
  indices = architecture.random_indices(spec, np.random.default_rng(0))
  config = _config(tmp_path, search_space=space.name, image_size=32,
                   input_channels=3, cost_model='pixel1_latency',
                   rl_cost_model_target=84.0, train_batch_size=2,
                   rl_batch_size_multiplier=1.0)
  logged, = _run_steps(config, spec, list(indices), 1, monkeypatch)
  assert logged['rlcontroller/estimated_cost'] == pytest.approx(
      _numpy_cost(config, spec, indices), rel=1e-5)


def _depends_on(tensor: tf.Tensor, op: tf.Operation) -> bool:
  """Whether running `tensor` needs `op` (data or control edges)."""
  seen, stack = set(), [tensor.op]
  while stack:
    node = stack.pop()
    if node is op:
      return True
    if node in seen:
      continue
    seen.add(node)
    stack.extend(t.op for t in node.inputs)
    stack.extend(node.control_inputs)
  return False


@pytest.mark.parametrize('validation_weights, waits', [
    ('pre_update', False), ('post_update', True)])
def test_validation_pass_waits_for_the_update_only_post_update(
    tmp_path, monkeypatch, validation_weights, waits):
  captured = {}

  def validation_accuracy(config, plan, masked_spec, batch, training):
    captured['after'] = training.train_op
    captured['accuracy'] = search.validate(config, plan, masked_spec, batch,
                                           training)
    return captured['accuracy']

  config = _config(tmp_path, validation_weights=validation_weights)
  with tf.Graph().as_default():
    images = tf.zeros([config.train_batch_size, 28, 28, 1])
    plan = plan_lib.resolve(config)
    search.make_model_fn(config, plan, tiny.tiny_spec(),
                         validate_fn=validation_accuracy)(
        {'train_images': images, 'validation_images': images},
        {'train_labels': tf.zeros([config.train_batch_size], tf.int32),
         'validation_labels': tf.zeros([config.train_batch_size], tf.int32)},
        tf.estimator.ModeKeys.TRAIN, {})
    assert _depends_on(captured['accuracy'], captured['after']) == waits


def test_validation_accuracy_is_the_top_1_of_the_validation_batch(
    tmp_path, monkeypatch):
  # The reward's quality: argmax of each validation logit row against the
  # validation labels (not the training ones), averaged over the batch.
  logits = np.array([[3, 1, 0], [0, 1, 2], [0, 5, 1], [2, 4, 0]], np.float32)
  monkeypatch.setattr(step_lib, 'validation_logits',
                      lambda *args, **kwargs: tf.constant(logits))
  config = _config(tmp_path)
  with tf.Graph().as_default():
    batch = search.Batch(
        train_images=None, train_labels=tf.constant([0, 2, 1, 1]),
        validation_images=tf.zeros([4, 28, 28, 1]),
        validation_labels=tf.constant([0, 1, 1, 0]))
    training = search.Training(
        train_op=tf.no_op(), finite=tf.constant(True), reads={},
        loss=None, empirical_loss=None, regularization_loss=None,
        learning_rate=None)
    accuracy = search.validate(config, plan_lib.resolve(config), None, batch,
                               training)
    with tf1.Session() as session:
      # Rows 0 and 2 are right: 2 of 4, exact in float32.
      assert session.run(accuracy) == 0.5
