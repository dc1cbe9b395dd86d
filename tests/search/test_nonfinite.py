"""`nonfinite`: the search step's guard against non-finite losses and gradients.

A step whose loss or any gradient entry is NaN or +-inf must apply no
gradient (they are zeroed) and report NaN, so the run stops with finite
weights (tests/e2e/test_search.py runs that end to end). These check the
two helpers on values chosen to cover each case, without depending on how a
CPU's arithmetic overflows.
"""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.search import nonfinite

tf1 = tf.compat.v1


def _check(loss, grads):
  """(finite, zeroed gradients) for float32 numpy inputs."""
  with tf.Graph().as_default():
    pairs = [(None if g is None else tf.constant(g), None) for g in grads]
    pairs.append((tf.IndexedSlices(tf.constant(grads[0]), tf.constant([0]),
                                   tf.constant([4])), None))
    finite = nonfinite.all_finite(tf.constant(loss), pairs)
    zeroed = nonfinite.finite_or_zero(pairs, finite)
    out = [g if g is None else (g.values if isinstance(g, tf.IndexedSlices)
                                else g) for g, _ in zeroed]
    with tf1.Session() as session:
      return session.run([finite, [g for g in out if g is not None]])


GOOD = np.array([1.5, -2e-30, 3e18, 0.0], np.float32)


def test_finite_step_keeps_its_gradients_bit_for_bit():
  finite, grads = _check(np.float32(0.7), [GOOD, None, GOOD * 2])
  assert finite
  np.testing.assert_array_equal(grads[0], GOOD)
  np.testing.assert_array_equal(grads[1], GOOD * 2)
  np.testing.assert_array_equal(grads[2], GOOD)  # IndexedSlices values.


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
def test_one_bad_gradient_entry_zeroes_every_gradient(bad):
  poisoned = GOOD.copy()
  poisoned[2] = bad
  # A finite loss with a non-finite gradient: what oneDNN gives for a NaN
  # input image.
  finite, grads = _check(np.float32(0.7), [GOOD, poisoned])
  assert not finite
  for g in grads:
    np.testing.assert_array_equal(g, np.zeros_like(g))


@pytest.mark.parametrize('loss', [np.nan, np.inf])
def test_a_bad_loss_zeroes_every_gradient(loss):
  finite, grads = _check(np.float32(loss), [GOOD])
  assert not finite
  for g in grads:
    np.testing.assert_array_equal(g, np.zeros_like(g))


@pytest.mark.parametrize('loss, other, reported', [
    (0.5, 1.0, 0.5), (np.inf, 1.0, np.nan), (-np.inf, 1.0, np.nan),
    (0.5, np.nan, np.nan), (0.5, -np.inf, np.nan)])
def test_the_reported_loss_is_nan_unless_both_losses_are_finite(
    loss, other, reported):
  with tf.Graph().as_default(), tf1.Session() as session:
    out = session.run(nonfinite.nan_unless_finite(
        tf.constant(loss, tf.float32), tf.constant(other, tf.float32)))
  np.testing.assert_array_equal(out, np.float32(reported))
