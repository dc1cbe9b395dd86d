"""XLA's own ops: the replica id on TPU cores, and `xla.compile`.

Both modules load when first used, not when this one is imported.
"""

from typing import Callable, List, Sequence

import tensorflow as tf


def replica_id() -> tf.Tensor:
  """int32 scalar: the TPU core (replica) running this op."""
  from tensorflow.compiler.tf2xla.python import xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  return xla.replica_id()


def compile(computation: Callable, inputs: Sequence[tf.Tensor]  # pylint: disable=redefined-builtin
            ) -> List[tf.Tensor]:
  """`computation(*inputs)` compiled by XLA as TPU compilation wraps a step
  (the tests and bench/xla_compile.py compile a step on a CPU)."""
  from tensorflow.python.compiler.xla import xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  return xla.compile(computation, inputs)
