"""A graph's control-flow context, and control inputs of existing ops.

TensorFlow keeps the v1 control-flow context a graph builds in (a `tf.cond`
branch, a while loop) in protected members; the op switches' routing is
built outside any context (docs/DESIGN.md, "Control flow"), and the deferred
update orders reads that exist before it after its catch-ups.
"""

import contextlib
from typing import Iterator, Optional

import tensorflow as tf


def in_control_flow(op: tf.Operation) -> bool:
  """Whether `op` was built inside a v1 control-flow context."""
  return op._get_control_flow_context() is not None  # pylint: disable=protected-access


@contextlib.contextmanager
def outside_control_flow(graph: Optional[tf.Graph] = None) -> Iterator[None]:
  """While active, ops are built outside any control-flow context.

  The context in force before is restored on exit.
  """
  graph = graph or tf.compat.v1.get_default_graph()
  outer = graph._get_control_flow_context()  # pylint: disable=protected-access
  graph._set_control_flow_context(None)  # pylint: disable=protected-access
  try:
    yield
  finally:
    graph._set_control_flow_context(outer)  # pylint: disable=protected-access


def add_control_input(op: tf.Operation, control: tf.Operation) -> None:
  """Makes `op`, which exists already, run only after `control`."""
  op._add_control_input(control)  # pylint: disable=protected-access
