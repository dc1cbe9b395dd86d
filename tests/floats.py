"""Float tolerances of tests that compare one result computed along two paths.

Two float32 computations of the same function (two graphs, two forms of a
network, TensorFlow against numpy) sum in different orders, and how they
round depends on the kernels: oneDNN picks them by CPU instruction set,
Eigen splits reductions by thread count, cuDNN picks algorithms by shape.
A tolerance must bound that rounding relative to the magnitude of what is
summed, never relative to a result that can cancel (docs/testing.md, "Float
tolerances").
"""

import numpy as np

# float32's unit roundoff: a correctly rounded operation is off by at most
# this fraction of its exact result.
UNIT_ROUNDOFF = 2.0 ** -24


def sum_rounding(n: int) -> float:
  """Bound on the relative rounding of a float32 sum or dot product.

  Higham, "Accuracy and Stability of Numerical Algorithms" (2nd ed., 2002),
  section 3.1: a sum of n terms, or a dot product of n pairs, computed in
  any order is off by at most gamma_n * sum(|terms|), with gamma_n =
  n u / (1 - n u).
  """
  return n * UNIT_ROUNDOFF / (1 - n * UNIT_ROUNDOFF)


def sum_tolerance(terms: np.ndarray, terms_tolerance: np.ndarray) -> float:
  """How far two paths' float32 sums of `terms` may differ.

  Each path's terms are off by at most `terms_tolerance` (per term), and
  each path's sum rounds by at most `sum_rounding(n) * sum(|terms|)`.

  Args:
    terms: one path's terms (any shape; e.g. `logits * projection`).
    terms_tolerance: per-term bound on the two paths' difference in
      `terms` (broadcast).

  Returns:
    The absolute tolerance of the two sums.
  """
  terms = np.abs(np.asarray(terms, np.float64))
  carried = np.sum(np.broadcast_to(terms_tolerance, terms.shape))
  return float(carried + 2 * sum_rounding(terms.size) * terms.sum())
