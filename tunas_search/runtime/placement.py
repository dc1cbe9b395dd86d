"""Where the ops of a step are placed: the host CPU beside an accelerator."""

import contextlib

import tensorflow as tf

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
