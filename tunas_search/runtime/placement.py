"""Where the ops of a step are placed: the host CPU beside an accelerator."""

import contextlib

import tensorflow as tf

from tunas_search.config.plan import StepPlan
from tunas_search.runtime import replicas

HOST = '/device:CPU:0'


def host_scope(on_host: bool):
  """The device scope of a step's scalar bookkeeping.

  The controller, cost model, reward, schedules and summary packing are a
  few hundred ops on a handful of scalars and short vectors. On a GPU each
  would be a kernel launch, so with one replica on a GPU they run on the
  host CPU (`StepPlan.controller_on_host`); the network's ops read the
  sampled masks and the learning rate from there (one copy each) and the
  reward reads the validation accuracy back (one scalar). Otherwise: no
  device scope (TensorFlow's placement).
  """
  return tf.device(HOST) if on_host else contextlib.nullcontext()


class StepDevices:
  """Where the parts of one search step run, as its plan lays them out.

  The step's method (`search/model_fn.py`) says what runs on the host and
  what is averaged over replicas; this says how, from the plan's
  `controller_on_host` and `layout` alone.
  """

  def __init__(self, plan: StepPlan):
    self._on_host = plan.controller_on_host
    self._layout = plan.layout

  def host(self):
    """The device scope of the step's scalar bookkeeping (`host_scope`)."""
    return host_scope(self._on_host)

  def mean(self, value: tf.Tensor) -> tf.Tensor:
    """`value`'s mean over the step's replicas; the identity on one."""
    return replicas.cross_replica_mean(value, self._layout.num_replicas,
                                       self._layout.use_tpu)

  def replica_id(self) -> tf.Tensor:
    """int64 scalar: the index of the replica building this op (0 on one)."""
    return replicas.replica_id(self._layout.use_tpu,
                               self._layout.num_replicas)
