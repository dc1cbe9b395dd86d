"""Tests for the stand-alone model_fn's evaluation metrics."""

import types

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.standalone import model_fn

tf1 = tf.compat.v1


def _metrics(labels, logits):
  """The values of `model_fn.metric_fn` over one batch."""
  with tf.Graph().as_default():
    metrics = model_fn.metric_fn(tf.constant(labels, tf.int32),
                                 tf.constant(logits, tf.float32))
    with tf1.Session() as session:
      session.run(tf1.local_variables_initializer())
      session.run({k: update for k, (_, update) in metrics.items()})
      return session.run({k: value for k, (value, _) in metrics.items()})


def test_top_k_accuracy_of_a_hand_computed_batch():
  # Eight classes; each row's label sits at a chosen rank of its logits
  # (rank 1 = largest): ranks 1, 2, 3, 4, 5, 6, 8 and 5.
  logits = np.array([[8, 7, 6, 5, 4, 3, 2, 1]] * 8, np.float32)
  ranks = [1, 2, 3, 4, 5, 6, 8, 5]
  labels = [r - 1 for r in ranks]
  got = _metrics(labels, logits)
  # Top-1: rank 1 only; top-5: ranks 1-5 (a top-3 would give 3/8). Counts
  # of hits over 8 are exact in float32.
  assert got == {'top_1_accuracy': 1 / 8, 'top_5_accuracy': 6 / 8}


def test_top_k_with_fewer_classes_than_k_counts_every_example():
  logits = np.array([[0.1, 0.5, 0.2], [3.0, 1.0, 2.0]], np.float32)
  got = _metrics([0, 0], logits)
  assert got == {'top_1_accuracy': 0.5, 'top_5_accuracy': 1.0}


def test_evaluation_loss_is_plain_cross_entropy():
  # No label smoothing and no weight decay in the evaluation loss: with
  # logits (2, 0, 0) and label 0 it is log(1 + 2 e^-2), and with label 1
  # log(e^2 + 2); their mean over the batch.
  logits = np.array([[2.0, 0.0, 0.0], [2.0, 0.0, 0.0]], np.float32)
  config = types.SimpleNamespace(num_classes=3)
  with tf.Graph().as_default():
    spec = model_fn._eval_spec(config, tf.constant(logits),
                               tf.constant([0, 1]))
    with tf1.Session() as session:
      loss = session.run(spec.loss)
  expected = (np.log1p(2 * np.exp(-2.0)) + np.log(np.exp(2.0) + 2)) / 2
  # float32 softmax cross-entropy of O(1) terms: a few ulps.
  assert loss == pytest.approx(expected, rel=1e-6)
