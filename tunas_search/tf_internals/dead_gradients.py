"""Dead, not zero, gradients for the weights a step does not use.

TuNAS's optimiser steps every weight, used or not, so a weight read by an op
choice the step did not select needs a zero gradient: in TensorFlow's v1
conds, a tensor a branch reads from outside enters through a Switch, whose
gradient is the branch's gradient when the branch ran and else a zero tensor
of the read's shape (a Switch, a Shape and a Fill, one a pass over the
weight's size). The deferred form (`deferred.DeferredRMSProp`) updates only
the weights a step uses, and for it the zeros are wasted work
(docs/DESIGN.md, "Control flow").

So a build for the deferred form has no conds at all (`ops.switch` with
`conds=False`): each choice computes on an input that is dead when it is
not selected, TensorFlow's executor skips every op a dead tensor reaches,
and the gradient of a weight such a choice reads is dead as well. A dead
gradient must only reach ops that cannot run in such a step: a sum of a
weight's gradients is dead if one part is (an AddN is not a Merge), so only
a weight used by one choice and nowhere else may be given one
(`weights.WeightUses.used_once`; `builder.build_network` checks it).
Whatever must run every step, e.g. the finite check and the gradient-sync
barrier, reads `or_zero` of a per-group scalar instead of the gradients
themselves.

A weight read outside the network's choices, e.g. by its masked
weight-decay term, is made dead the same way by `route`: while
`dead_when_unused(reads)` is active, the Switch `route` builds passes its
taken side's gradient alone, dead where `pred` was false.

Merges built outside any cond inside `merges()` (the op switches' routing,
`or_zero`) take `_merge_grad`, a smaller graph for TensorFlow's Merge
gradient, in every form; the routing's Switches, built inside `routing()`,
take `_route_grad`, TensorFlow's Switch gradient without its guards.
"""

import contextlib
from typing import Iterable, List

import tensorflow as tf
# TensorFlow's own gradient of Switch, for every Switch this module leaves
# alone (TensorFlow 2.15 is pinned; tests/supernet/test_dead_gradients.py
# fails if it moves).
from tensorflow.python.ops import control_flow_grad  # pylint: disable=g-direct-tensorflow-import

SWITCH_GRADIENT = 'TunasWeightSwitch'
# Ops between a weight's read and `route`'s Switch: `widths.narrow`'s slice.
_PASS_THROUGH = ('StridedSlice',)
# The reads given dead gradients, innermost `dead_when_unused` last.
_READS: List[frozenset] = [frozenset()]


@contextlib.contextmanager
def dead_when_unused(reads: Iterable[tf.Tensor]):
  """While active, gradients of `reads` through `route` are dead where unused.

  Wrap the `tf.gradients` call in it.

  Args:
    reads: weight reads (snapshots) that each have one use, inside a choice.
  """
  _READS.append(frozenset(t.name for t in reads))
  try:
    yield
  finally:
    _READS.pop()


def _reads_weight(t: tf.Tensor) -> bool:
  """Whether `t` is one of the active reads, or a slice of one."""
  reads = _READS[-1]
  if not reads:
    return False
  while t.name not in reads:
    if t.op.type not in _PASS_THROUGH:
      return False
    t = t.op.inputs[0]
  return True


@tf.RegisterGradient(SWITCH_GRADIENT)
def _weight_switch_grad(op, *grads):
  """`route`'s Switch: its taken side's gradient alone for an active read.

  TensorFlow's gradient for any other Switch (one in a cond, or one whose
  input is not among the active reads).
  """
  if (op._get_control_flow_context() is not None  # pylint: disable=protected-access
      or not _reads_weight(op.inputs[0])):
    return control_flow_grad._SwitchGrad(op, *grads)  # pylint: disable=protected-access
  # The taken side's gradient as it is: dead unless `pred` held. (A Merge
  # of it with itself, as TensorFlow does for a captured resource, logs a
  # warning each time it runs live.)
  return grads[1], None


def route(x: tf.Tensor, pred: tf.Tensor) -> tf.Tensor:
  """`x` when `pred`, else dead; build it outside any control flow.

  Inside `dead_when_unused`, a weight read (or a slice of one) routed here
  gets a dead gradient where `pred` is false (module docstring).
  """
  graph = tf.compat.v1.get_default_graph()
  with graph.gradient_override_map({'Switch': SWITCH_GRADIENT}):
    _, take = tf.raw_ops.Switch(data=x, pred=pred)
  return take


# Merges built outside any cond (the op switches' routing, `or_zero`) take
# `_merge_grad`: TensorFlow's gradient of such a Merge compares its
# value_index with each input's index (a Const, an Equal and a Switch per
# input); `_merge_grad` splits the gradient by value_index with one Switch
# per input after the first (~1,400 fewer graph ops in
# `mobilenet_v3_like_search`). Same values, same dead outputs.
MERGE_GRADIENT = 'TunasMerge'


@contextlib.contextmanager
def merges():
  """Merge ops built while active take `_merge_grad`."""
  graph = tf.compat.v1.get_default_graph()
  with graph.gradient_override_map({'Merge': MERGE_GRADIENT}):
    yield


@tf.RegisterGradient(MERGE_GRADIENT)
def _merge_grad(op, grad, _):
  """Input i's gradient: `grad` where value_index is i, else dead."""
  if (op._get_control_flow_context() is not None  # pylint: disable=protected-access
      or not isinstance(grad, tf.Tensor) or len(op.inputs) < 2):
    return control_flow_grad._MergeGrad(op, grad, None)  # pylint: disable=protected-access
  index = op.outputs[1]
  preds = [tf.cast(index, tf.bool)] + [
      tf.equal(index, i) for i in range(1, len(op.inputs) - 1)]
  # value_index 0 takes the false side; any other the true side, split on.
  first, rest = tf.raw_ops.Switch(data=grad, pred=preds[0])
  grads = [first]
  for pred in preds[1:]:
    rest, taken = tf.raw_ops.Switch(data=rest, pred=pred)
    grads.append(taken)
  return grads + [rest]


# Switches built outside any cond inside `routing()` (the op switches'
# routing) take `_route_grad`: the Merge of both sides' gradients without
# TensorFlow's two guarding Switches (two fewer graph ops per routing Switch,
# ~8 per op choice).
ROUTE_GRADIENT = 'TunasRoute'


@contextlib.contextmanager
def routing():
  """Merges built while active take `_merge_grad`, Switches `_route_grad`.

  Build only Switches each of whose outputs feeds Merges built here (or
  nothing) while it is active: `_route_grad` relies on their gradients
  being dead wherever the output was.
  """
  graph = tf.compat.v1.get_default_graph()
  with graph.gradient_override_map({'Merge': MERGE_GRADIENT,
                                    'Switch': ROUTE_GRADIENT}):
    yield


@tf.RegisterGradient(ROUTE_GRADIENT)
def _route_grad(op, *grads):
  """The Merge of the two sides' gradients.

  TensorFlow guards each side's gradient with a Switch on the forward
  predicate, so that a live gradient of the side not taken cannot reach the
  Merge. A routing Switch needs no guard: each output feeds Merges, whose
  gradient (`_merge_grad`) is dead for an input that was not taken, and
  TensorFlow's zeros for an output without a gradient are dead in the same
  way, so the gradient of the side not taken is dead already.
  """
  if (op._get_control_flow_context() is not None  # pylint: disable=protected-access
      or not all(isinstance(g, tf.Tensor) for g in grads)):
    return control_flow_grad._SwitchGrad(op, *grads)  # pylint: disable=protected-access
  return tf.raw_ops.Merge(inputs=list(grads)).output, None


def or_zero(value: tf.Tensor, pred: tf.Tensor) -> tf.Tensor:
  """A scalar that is `value` when `pred` and 0 otherwise, live either way.

  Args:
    value: a scalar that is live when `pred` (and may be dead otherwise),
      built outside any control flow.
    pred: bool scalar.
  """
  zero, _ = tf.raw_ops.Switch(data=tf.zeros([], value.dtype), pred=pred)
  with merges():
    return tf.raw_ops.Merge(inputs=[value, zero]).output
