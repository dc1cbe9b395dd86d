"""`xla_fusion.computed_once`: the value is unchanged, only XLA's fusion of it.

Its effect on XLA's fusion is measured by bench/xla_compile.py (docs/xla.md);
here: the learning rates it passes on are bit-identical, on the CPU kernels
and compiled.
"""

import numpy as np
import tensorflow as tf

from tunas_search.runtime import xla_fusion
from tunas_search.tf_internals import xla

# 0, float32's largest and values across far more than a schedule's range.
# Not below 2^-125, where x * 0.5 would be subnormal (flushed to zero or not,
# depending on the CPU's mode); a cosine schedule's smallest positive value is
# ~1e-8 of its base rate.
VALUES = np.concatenate([
    [0.0, np.finfo(np.float32).max],
    np.geomspace(1e-30, 1e3, 998)]).astype(np.float32)


def _run(compiled: bool) -> np.ndarray:
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [])

    def once(value):
      return xla_fusion.computed_once(value)

    out = xla.compile(once, [x])[0] if compiled else once(x)
    with tf.compat.v1.Session() as session:
      return np.array([session.run(out, {x: v}) for v in VALUES], np.float32)


def test_value_is_bit_identical_on_cpu_kernels():
  np.testing.assert_array_equal(_run(compiled=False), VALUES)


def test_value_is_bit_identical_compiled():
  np.testing.assert_array_equal(_run(compiled=True), VALUES)


def test_tensor_value_is_bit_identical_compiled():
  # The controller passes its masks (0, 1 and 1/n) through it.
  masks = np.array([[0.0, 1.0, 0.0], [1 / 3, 1 / 3, 1 / 3]], np.float32)
  with tf.Graph().as_default():
    out = xla.compile(xla_fusion.computed_once, [tf.constant(masks)])[0]
    with tf.compat.v1.Session() as session:
      np.testing.assert_array_equal(session.run(out), masks)
