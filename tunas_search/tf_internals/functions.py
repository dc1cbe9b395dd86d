"""Graph functions that are never inlined (TF1's `Defun`).

A call of such a function is one node of the step's graph, dead or live as a
whole, where its body written out would be visited node by node every step
(`supernet.deferred`; docs/DESIGN.md, "Control flow"). TensorFlow's public
`tf.function` is inlined into a TF1 graph.
"""

from typing import Callable, Sequence

import tensorflow as tf
from tensorflow.python.framework import function as graph_function  # pylint: disable=g-direct-tensorflow-import


def never_inlined(python_function: Callable, name: str,
                  types: Sequence[tf.DType]) -> Callable:
  """`python_function` as a graph function that is never inlined.

  Args:
    python_function: builds the body from one tensor per entry of `types`.
    name: the function's name in the graph (and its calls' op type), with
      a hash of its definition.
    types: the dtypes of its arguments.
  """
  python_function.__name__ = name
  return graph_function.Defun(*types, noinline=True)(python_function)
