"""Tests for controller logits, sampling, log-prob, entropy and warm-up."""

import math

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tunas_search.controller import policy as controller
from tunas_search.controller import adam as controller_adam
from tunas_search.search import rewards
from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.space.schema import OneOf


def _flat_spec():
  """Three independent decisions: 3 ops, 4 widths, 1 fixed op."""
  return [OneOf((3, 5, 7), schema.OP), OneOf((16, 24, 32, 40), schema.FILTERS),
          OneOf(('fixed',), schema.OP)]


def _nested_spec():
  """A skippable bottleneck: kernel (0) and expansion (1) under op (2)."""
  inner = specs.DepthwiseBottleneck(
      kernel_size=OneOf((3, 5), schema.OP),
      expansion_filters=OneOf((specs.FilterMultiplier(3.0),
                               specs.FilterMultiplier(6.0)), schema.FILTERS))
  return specs.Residual(OneOf((inner, specs.Zero()), schema.OP))


def _load(sess, decisions, variables, logit_values):
  """Loads per-decision logit values into `create_logits`' variables."""
  for n, value in controller.grouped_values(decisions, logit_values).items():
    variables[n].load(value, sess)


def _run_samples(spec, runs, *, ops_prob=0.0, filters_prob=0.0,
                 temperature=1.0, seed=1, logit_values=None, graph_seed=None):
  """Builds one sample op and evaluates it `runs` times.

  Args:
    seed: the op-level seed of `controller.sample`.
    graph_seed: the graph-level seed; with `seed=None` it alone fixes the
      draws, as in a search run with a seed.

  Returns:
    (decisions, list of evaluated ControllerSample).
  """
  decisions = schema.decisions(spec)
  with tf.Graph().as_default():
    if graph_seed is not None:
      tf.compat.v1.set_random_seed(graph_seed)
    variables = controller.create_logits(decisions)
    s = controller.sample(decisions,
                          controller.decision_logits(decisions, variables),
                          increase_ops_prob=ops_prob,
                          increase_filters_prob=filters_prob,
                          temperature=temperature, seed=seed)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      if logit_values is not None:
        _load(sess, decisions, variables, logit_values)
      return decisions, [sess.run(s) for _ in range(runs)]


def test_create_logits_one_variable_per_number_of_choices():
  decisions = schema.decisions(_flat_spec() + [_nested_spec()])
  with tf.Graph().as_default():
    variables = controller.create_logits(decisions)
    again = controller.create_logits(decisions)
    # 3 ops and the three choices of the nested spec have 2, 3 and 4
    # choices; the fixed op has none.
    assert {n: v.op.name for n, v in variables.items()} == {
        2: 'rlcontroller/logits/choices_2', 3: 'rlcontroller/logits/choices_3',
        4: 'rlcontroller/logits/choices_4'}
    assert [v.op.name for v in variables.values()] == [
        controller.variable_name(n) for n in variables]
    assert {n: v.shape.as_list() for n, v in variables.items()} == {
        2: [3, 2], 3: [1, 3], 4: [1, 4]}
    assert all(variables[n] is again[n] for n in variables)
    assert len(tf.compat.v1.trainable_variables()) == 3
    logits = controller.decision_logits(decisions, variables)
    assert [l.shape.as_list() for l in logits] == [
        [d.num_choices] for d in decisions]
    by_tag = controller.logits_by_tag_name(decisions, logits)
    assert by_tag['op_indices_3'] is logits[5]
    assert by_tag['filters_indices_0'] is logits[1]
    by_path = controller.logits_by_path(decisions, logits)
    assert by_path[decisions[3].path] is logits[3]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      values = [np.arange(d.num_choices, dtype=np.float32) + 10 * i
                for i, d in enumerate(decisions)]
      values[2] = np.zeros(1, np.float32)  # A fixed op's logit stays 0.
      _load(sess, decisions, variables, values)
      # Each decision reads back its own row.
      for got, expected in zip(sess.run(logits), values):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match=r'expected \[3, 2\]'):
      controller.decision_logits(decisions, {2: tf.zeros([2, 2]),
                                             3: tf.zeros([1, 3]),
                                             4: tf.zeros([1, 4])})


def test_init_entropy_and_log_prob_flat_spec():
  _, samples = _run_samples(_flat_spec(), 3)
  for s in samples:
    # In-graph float32 log-softmax sums (~1e-7 relative) against float64
    # math: rel=1e-6 here and below allows a few float32 ulps.
    assert s.entropy == pytest.approx(math.log(3) + math.log(4), rel=1e-6)
    assert s.log_prob == pytest.approx(math.log(1 / 3) + math.log(1 / 4),
                                       rel=1e-6)
    np.testing.assert_array_equal(s.counted, [1.0, 1.0, 1.0])
    assert s.indices[2] == 0
    np.testing.assert_array_equal(s.masks[2], [1.0])
    for mask, index, n in zip(s.masks, s.indices, (3, 4, 1)):
      np.testing.assert_array_equal(mask, np.eye(n)[index])


def test_mobilenet_v3_like_all_ops_on_counts_every_decision():
  spec = search_spaces.get('mobilenet_v3_like_search').spec()
  decisions, (s,) = _run_samples(spec, 1, ops_prob=1.0, filters_prob=0.0)
  assert len(decisions) == 86
  ns = np.array([d.num_choices for d in decisions])
  # With every op mask uniform (all > 0), every nested decision counts.
  np.testing.assert_array_equal(s.counted, np.ones(86))
  # float32 sums of 86 terms: rounding grows with the count, hence 1e-5.
  assert s.entropy == pytest.approx(np.log(ns).sum(), rel=1e-5)
  # Op decisions contribute log(p_ops) = 0; width decisions log(1/n).
  is_filters = np.array([d.tag == schema.FILTERS for d in decisions])
  assert s.log_prob == pytest.approx(-np.log(ns[is_filters]).sum(), rel=1e-5)
  for d, mask in zip(decisions, s.masks):
    if d.tag == schema.OP:
      # float32 1/n is within one float32 ulp (6e-8 relative) of float64
      # 1/n: inside assert_allclose's default rtol=1e-7, here and below.
      np.testing.assert_allclose(mask, np.full(d.num_choices,
                                               1 / d.num_choices))


def test_filter_warmup_at_one_uses_widest_and_costs_nothing():
  decisions, samples = _run_samples(_flat_spec(), 3, ops_prob=1.0,
                                    filters_prob=1.0)
  for s in samples:
    np.testing.assert_array_equal(s.masks[1], [0.0, 0.0, 0.0, 1.0])
    assert s.indices[1] == 3
    np.testing.assert_allclose(s.masks[0], [1 / 3] * 3)
    assert s.log_prob == 0.0
    np.testing.assert_array_equal(s.warmup, [True, True, False])
    # Entropy does not depend on warm-up.
    assert s.entropy == pytest.approx(math.log(12), rel=1e-6)


def test_warmup_at_half_adds_log_half():
  _, samples = _run_samples(_flat_spec(), 40, ops_prob=0.5,
                            filters_prob=0.5)
  seen = set()
  for s in samples:
    expected = 0.0
    for k, n in ((0, 3), (1, 4)):
      expected += math.log(0.5) + (0.0 if s.warmup[k] else math.log(1 / n))
      seen.add((k, bool(s.warmup[k])))
    assert s.log_prob == pytest.approx(expected, rel=1e-6)
    if s.warmup[0]:
      np.testing.assert_allclose(s.masks[0], [1 / 3] * 3)
    if s.warmup[1]:
      assert s.indices[1] == 3
  assert len(seen) == 4  # both outcomes of both coins occurred


def test_hierarchical_counting_skipped_layer():
  _, samples = _run_samples(_nested_spec(), 40, seed=3)
  outcomes = set()
  for s in samples:
    skipped = s.indices[2] == 1
    outcomes.add(bool(skipped))
    if skipped:
      np.testing.assert_array_equal(s.counted, [0.0, 0.0, 1.0])
      assert s.log_prob == pytest.approx(math.log(0.5), rel=1e-6)
      assert s.entropy == pytest.approx(math.log(2), rel=1e-6)
    else:
      np.testing.assert_array_equal(s.counted, [1.0, 1.0, 1.0])
      assert s.log_prob == pytest.approx(3 * math.log(0.5), rel=1e-6)
      assert s.entropy == pytest.approx(3 * math.log(2), rel=1e-6)
  assert outcomes == {True, False}


def test_temperature_scales_logits():
  # logits [0, ln 4] / T=2 -> probabilities [1/3, 2/3].
  _, samples = _run_samples([OneOf((0, 1), schema.OP)], 300, temperature=2.0,
                            logit_values=[[0.0, math.log(4.0)]])
  probs = np.array([1 / 3, 2 / 3])
  for s in samples[:5]:
    assert s.entropy == pytest.approx(-(probs * np.log(probs)).sum(),
                                      rel=1e-6)
    assert s.log_prob == pytest.approx(math.log(probs[s.indices[0]]),
                                       rel=1e-6)
  frequency = np.mean([s.indices[0] for s in samples])
  # Seeded draws, so the value is fixed; the bound is three binomial standard
  # deviations (sqrt(2/9 / 300) = 0.027), so it does not hinge on a lucky
  # seed.
  assert frequency == pytest.approx(2 / 3, abs=0.08)


@pytest.mark.parametrize('prob', [0.0, 1.0])
def test_gradients_finite_at_extreme_warmup(prob):
  decisions = schema.decisions(_nested_spec())
  with tf.Graph().as_default():
    variables = controller.create_logits(decisions)
    s = controller.sample(decisions,
                          controller.decision_logits(decisions, variables),
                          increase_ops_prob=prob,
                          increase_filters_prob=prob, seed=0)
    grads = tf.gradients(s.log_prob - s.entropy, list(variables.values()))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      # Near-deterministic logits: probabilities underflow to 0 and 1.
      _load(sess, decisions, variables, [[200.0, -200.0]] * len(decisions))
      for _ in range(5):
        values = sess.run([s.log_prob, s.entropy] + grads)
        for v in values:
          assert np.all(np.isfinite(v))


def test_samples_without_op_seed_differ_between_steps():
  # No op-level seed (as in a search): successive steps draw afresh. The
  # graph seed only makes this test repeatable.
  _, samples = _run_samples(_flat_spec(), 20, seed=None, graph_seed=0)
  assert len({tuple(s.indices) for s in samples}) > 1


def test_sample_rejects_mismatched_logits():
  decisions = schema.decisions(_flat_spec())
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match='expected \\[3\\]'):
      controller.sample(decisions, [tf.zeros([2]), tf.zeros([4]),
                                    tf.zeros([1])],
                        increase_ops_prob=0.0, increase_filters_prob=0.0)
    with pytest.raises(ValueError, match='2 logits for 3'):
      controller.sample(decisions, [tf.zeros([3])] * 2,
                        increase_ops_prob=0.0, increase_filters_prob=0.0)


def test_numpy_helpers():
  values = [np.array([0.0, math.log(3.0)]), np.array([2.0, 2.0, 1.0]),
            np.array([5.0])]
  assert controller.argmax_indices(values) == [1, 0, 0]
  # float64 numpy softmax against the closed forms: default rtol=1e-7.
  probs = controller.probabilities(values)
  np.testing.assert_allclose(probs[0], [0.25, 0.75])
  e = math.e
  np.testing.assert_allclose(probs[1], [e / (2 * e + 1)] * 2 +
                             [1 / (2 * e + 1)])
  np.testing.assert_allclose(probs[2], [1.0])


def test_read_logit_values_from_checkpoint(tmp_path):
  decisions = schema.decisions(_flat_spec() + [_nested_spec()])
  values = [np.arange(d.num_choices, dtype=np.float32) - i
            for i, d in enumerate(decisions)]
  values[2] = np.zeros(1, np.float32)
  with tf.Graph().as_default():
    variables = controller.create_logits(decisions)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _load(sess, decisions, variables, values)
      saver.save(sess, str(tmp_path / 'model.ckpt'))
  got = controller.read_logit_values(str(tmp_path), decisions)
  for a, b in zip(got, values):
    np.testing.assert_array_equal(a, b)
  assert not controller.has_legacy_logits(str(tmp_path))
  with pytest.raises(KeyError, match='other/logits/choices_'):
    controller.read_logit_values(str(tmp_path), decisions, scope='other')
  # Another spec with as many numbers of choices but other decisions.
  with pytest.raises(KeyError,
                     match=r'shape \[3, 2\], but the spec has 2 decisions'):
    controller.read_logit_values(str(tmp_path), decisions[:2] + [
        decisions[3]] + decisions[5:])


def test_read_logit_values_of_a_checkpoint_with_one_variable_per_decision(
    tmp_path):
  """The layout before the logits were grouped is still read."""
  decisions = schema.decisions(_nested_spec())
  with tf.Graph().as_default():
    for i, d in enumerate(decisions):
      tf.compat.v1.get_variable(controller.legacy_variable_name(d),
                                initializer=[float(i), -1.0])
      tf.compat.v1.get_variable(
          controller.legacy_variable_name(d) + '/adam_m', initializer=[0.0])
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, str(tmp_path / 'model.ckpt'))
  got = controller.read_logit_values(str(tmp_path), decisions)
  np.testing.assert_array_equal(np.stack(got), [[0, -1], [1, -1], [2, -1]])
  assert controller.has_legacy_logits(str(tmp_path))


def test_reinforce_learns_preferred_choice():
  """Reward 1 for choice 2 of 4, else 0: its probability passes 0.9."""
  decisions = schema.decisions([OneOf((0, 1, 2, 3), schema.OP)])
  with tf.Graph().as_default():
    variables = list(controller.create_logits(decisions).values())
    s = controller.sample(decisions, [variables[0][0]],
                          increase_ops_prob=0.0,
                          increase_filters_prob=0.0, seed=7)
    reward = tf.cast(tf.equal(s.indices[0], 2), tf.float32)
    advantage = reward - rewards.ema_baseline(reward, momentum=0.9)
    loss = rewards.reinforce_loss(s.log_prob, advantage, s.entropy, 0.0)
    train = controller_adam.apply_adam(
        list(zip(tf.gradients(loss, variables), variables)), 0.05,
        tf.identity)
    prob = tf.nn.softmax(variables[0][0])[2]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(300):
        sess.run(train)
      assert sess.run(prob) > 0.9


def test_stateless_seed_makes_replicas_differ_and_is_reproducible():
  """Different replica seeds give different samples; equal seeds repeat."""
  decisions = schema.decisions(
      search_spaces.get('proxylessnas_search').spec())
  with tf.Graph().as_default():
    logits = controller.decision_logits(
        decisions, controller.create_logits(decisions))
    seed = tf.compat.v1.placeholder(tf.int32, [2])
    out = controller.sample(decisions, logits, increase_ops_prob=0.0,
                            increase_filters_prob=0.0, stateless_seed=seed)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      a = sess.run(out.indices, {seed: [5, 0]})
      b = sess.run(out.indices, {seed: [5, 7919]})
      c = sess.run(out.indices, {seed: [5, 0]})
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(a, c)


def _reference_uniform(seed, n):
  """controller.counter_uniform in plain Python integers (the definition)."""
  m = 0xFFFFFFFF

  def mix(h):
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)

  out = []
  for i in range(n):
    h = i
    for s in seed:
      h = mix(mix(h) ^ (s & m))
    out.append(((mix(h) >> 8) + 0.5) / 2**24)
  return np.array(out, np.float32)


@pytest.mark.parametrize('seed', [[0, 0, 0], [3, 123456789012, 1], [7, 1]])
def test_counter_uniform_is_its_integer_definition(seed):
  with tf.Graph().as_default():
    values = controller.counter_uniform(tf.constant(seed, tf.int64), 500)
    with tf.compat.v1.Session() as session:
      got = session.run(values)
  np.testing.assert_array_equal(got, _reference_uniform(seed, 500))
  assert 0.0 < got.min() and got.max() < 1.0


def test_centred_unit_rounds_every_24_bit_value_once():
  # All 2^24 inputs: the two-part sum must round like the exact value does.
  top = np.arange(1 << 24, dtype=np.int64)
  with tf.Graph().as_default():
    values = controller._centred_unit(  # pylint: disable=protected-access
        tf.range(1 << 24, dtype=tf.int64))
    with tf.compat.v1.Session() as session:
      got = session.run(values)
  np.testing.assert_array_equal(got, ((top + 0.5) / 2**24).astype(np.float32))
  assert got.dtype == np.float32


def _reference_sample(decisions, logit_values, uniform, p_ops, p_filters):
  """Per-decision sampling in numpy, from the same uniforms (the definition).

  The noise is laid out in decision order: each multi-choice decision's
  Gumbel entries, then one warm-up coin per multi-choice decision.
  """
  multi = [i for i, d in enumerate(decisions) if d.num_choices > 1]
  total = sum(decisions[i].num_choices for i in multi)
  gumbel = -np.log(-np.log(uniform[:total].astype(np.float64)))
  indices, log_probs, warmup = [0] * len(decisions), [0.0] * len(decisions), (
      [False] * len(decisions))
  margins = []  # Between the best and the second-best perturbed logit.
  offset = 0
  for k, i in enumerate(multi):
    d = decisions[i]
    z = np.asarray(logit_values[i], np.float64)
    log_p = z - z.max() - np.log(np.exp(z - z.max()).sum())
    scores = log_p + gumbel[offset:offset + d.num_choices]
    sampled = int(np.argmax(scores))
    margins.append(np.diff(np.sort(scores)[-2:])[0])
    offset += d.num_choices
    # The coins are exact float32 values, compared with float32 p as TF does.
    p = np.float32(p_filters if d.tag == schema.FILTERS else p_ops)
    warmup[i] = bool(uniform[total + k] < p)
    widest = d.tag == schema.FILTERS and warmup[i]
    indices[i] = (controller.architecture.widest_index(d) if widest
                  else sampled)
    log_probs[i] = (np.log(p) if warmup[i]
                    else np.log(1.0 - p) + log_p[sampled])
  return (np.array(indices), np.array(log_probs), np.array(warmup),
          min(margins))


@pytest.mark.parametrize('name', ['mobilenet_v3_like_search',
                                  'proxylessnas_search'])
def test_rows_sampled_together_match_per_decision_sampling(name):
  """The sampler computes same-size decisions as rows of one tensor; each
  decision must still read its own noise and coin and give what sampling it
  alone gives."""
  decisions = schema.decisions(search_spaces.get(name).spec())
  rng = np.random.default_rng(7)
  seed_values = [3, 11, 0]
  multi = [d for d in decisions if d.num_choices > 1]
  n_uniform = sum(d.num_choices for d in multi) + len(multi)
  uniform = _reference_uniform(seed_values, n_uniform)
  with tf.Graph().as_default():
    variables = controller.create_logits(decisions)
    s = controller.sample(decisions,
                          controller.decision_logits(decisions, variables),
                          increase_ops_prob=0.3,
                          increase_filters_prob=0.6,
                          stateless_seed=tf.constant(seed_values))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      values = [rng.normal(size=d.num_choices).astype(np.float32) * 2.0
                for d in decisions]
      _load(sess, decisions, variables, values)
      got = sess.run(s)
  indices, log_probs, warmup, margin = _reference_sample(
      decisions, values, uniform, 0.3, 0.6)
  # No near tie that float32 rounding (which may differ between CPUs) could
  # flip: the comparison of indices below is then machine-independent.
  assert margin > 1e-4
  np.testing.assert_array_equal(got.indices, indices)
  np.testing.assert_array_equal(got.warmup, warmup)
  # Both outcomes of the coins and of the draws occur, so a swapped row
  # would show.
  assert 0 < warmup.sum() < len(multi)
  np.testing.assert_allclose(got.log_probs, log_probs, rtol=1e-5, atol=1e-6)
  for d, mask, index, w in zip(decisions, got.masks, indices, warmup):
    expected = (np.full(d.num_choices, 1.0 / d.num_choices)
                if w and d.tag == schema.OP else np.eye(d.num_choices)[index])
    np.testing.assert_allclose(mask, expected, rtol=1e-7)
