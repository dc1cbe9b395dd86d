"""Tests for the in-graph learning-rate and warm-up schedules."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.search import schedules


def _values(fn, steps):
  """Evaluates `fn(step)` at each Python step through an int64 placeholder."""
  with tf.Graph().as_default():
    step = tf.compat.v1.placeholder(tf.int64, [])
    out = fn(step)
    with tf.compat.v1.Session() as sess:
      return [float(sess.run(out, {step: s})) for s in steps]


def test_cosine_with_warmup_key_steps():
  lr = _values(lambda s: schedules.cosine_with_warmup(s, 0.4, 1000, 100),
               [0, 50, 100, 550, 1000, 1200])
  # Warm-up: linear from 0; then (1 + cos(pi * p)) / 2 with p = 450 / 900.
  # float32 schedules against float64: atol, as some expected values are 0
  # (no relative tolerance fits them); 1e-6 is a few float32 ulps of 0.4.
  np.testing.assert_allclose(lr, [0.0, 0.2, 0.4, 0.2, 0.0, 0.0], atol=1e-6)


def test_cosine_without_warmup_starts_at_peak():
  lr = _values(lambda s: schedules.cosine_with_warmup(s, 1.0, 100, 0),
               [0, 25, 100])
  # float32 against float64, zeros included: atol as above.
  np.testing.assert_allclose(
      lr, [1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.0], atol=1e-6)


def test_cosine_rejects_bad_warmup():
  with pytest.raises(ValueError, match='warmup_steps'):
    schedules.cosine_with_warmup(0, 1.0, 10, 20)


def test_rl_learning_rate_exponential():
  lr = _values(
      lambda s: schedules.rl_learning_rate(s, 1e-3, 1000, 200, True),
      [0, 199, 200, 600, 1000])
  # float32 10^p: the rounding of p (~6e-8) is multiplied by ln 10 in the
  # result, plus pow's and the product's own rounding: 1e-5 relative leaves
  # a wide margin over the ~3e-7 this amounts to.
  np.testing.assert_allclose(
      lr, [0.0, 0.0, 1e-3, 1e-3 * 10**0.5, 1e-2], rtol=1e-5)


def test_rl_learning_rate_constant_after_delay():
  lr = _values(
      lambda s: schedules.rl_learning_rate(s, 1e-3, 1000, 200, False),
      [0, 200, 1000])
  # float32 1e-3 against float64 1e-3: within one ulp (6e-8 relative).
  np.testing.assert_allclose(lr, [0.0, 1e-3, 1e-3], rtol=1e-6)


def test_linear_decay_prob():
  p = _values(lambda s: schedules.linear_decay_prob(s, 400),
              [0, 100, 400, 1000])
  # float32 1 - step/400: exact for these steps; atol (zeros present) of one
  # ulp of 1.
  np.testing.assert_allclose(p, [1.0, 0.75, 0.0, 0.0], atol=1e-7)
  assert _values(lambda s: schedules.linear_decay_prob(s, 0), [0, 5]) == [
      0.0, 0.0]


def test_schedules_accept_python_steps_in_eager():
  # float32 results: the default rel=1e-6 is a few ulps.
  assert float(schedules.linear_decay_prob(100, 400)) == pytest.approx(0.75)
  assert float(schedules.cosine_with_warmup(
      tf.constant(50, tf.int64), 0.4, 1000, 100)) == pytest.approx(0.2)
