"""Filter warm-up trains the widest choice by value, in any order of choices."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.controller import policy as controller
from tunas_search.space import schema
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import FilterMultiplier

# Widths and multipliers listed out of order: the widest is not the last.
SPEC = {'widths': OneOf([16, 32, 8], schema.FILTERS),
        'expansion': OneOf([FilterMultiplier(6.0), FilterMultiplier(3.0)],
                           schema.FILTERS),
        'kernel': OneOf([3, 5, 7], schema.OP)}


def test_widest_index_by_value():
  # Dict keys are traversed sorted: expansion, kernel, widths.
  expansion, kernel, widths = schema.decisions(SPEC)
  assert (expansion.path, kernel.path, widths.path) == (
      'expansion', 'kernel', 'widths')
  assert architecture.widest_index(widths) == 1
  assert architecture.widest_index(expansion) == 0
  with pytest.raises(ValueError, match='cannot compare the width'):
    architecture.widest_index(
        schema.decisions({'x': OneOf(['a', 'b'], schema.FILTERS)})[0])


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_filter_warmup_samples_the_widest_by_value(seed):
  decisions = schema.decisions(SPEC)
  with tf.Graph().as_default():
    logits = [tf.constant(np.eye(d.num_choices)[-1] * 5.0, tf.float32)
              for d in decisions]  # The controller prefers the last choice.
    sample = controller.sample(decisions, logits, increase_ops_prob=0.0,
                               increase_filters_prob=1.0, seed=seed)
    with tf.compat.v1.Session() as sess:
      indices, masks = sess.run([sample.indices, sample.masks])
  assert (indices[0], indices[2]) == (0, 1)  # expansion 6.0, width 32.
  np.testing.assert_array_equal(masks[0], [1.0, 0.0])
  np.testing.assert_array_equal(masks[2], [0.0, 1.0, 0.0])
  assert indices[1] == 2  # The op decision is sampled: its peaked choice.
