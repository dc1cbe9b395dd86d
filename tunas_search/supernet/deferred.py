"""RMSProp whose steps of unused shared weights are deferred, exactly.

TuNAS trains the shared weights with RMSProp and momentum, and every weight
takes a step every step (docs/method.md section 6): a weight that the sampled
architecture does not use has a zero gradient (its weight decay is masked
too), yet moves on with its momentum. With g = 0, TensorFlow's RMSProp step

    ms <- rho * ms + (1 - rho) * g**2,  mom <- mu * mom + lr * g / sqrt(ms + eps),
    var <- var - mom

has a closed form over k such steps, whatever the learning rates were:

    ms * rho**k,  mom * mu**k,  var - mom * mu * (1 - mu**k) / (1 - mu).

`DeferredRMSProp` updates only the weights the step's architecture uses
(grouped by the op choices that use them, `weights.WeightUses`); a group's
missed steps are taken in that closed form at the start of the next step that
uses it, before its weights are read. The weights then hold the same values
as under TuNAS's optimiser, to float rounding, while a step costs the update
of the sampled path only (docs/method.md, "Deferred steps of unused weights").

The catch-up and the update of each group run only when the group is used
(`_when`), and the gradients of a weight used once, inside a choice, are dead
in a step that does not use it (`gradients`, `dead_gradients`): nothing of an
unused weight's backward pass runs. Row-indexed ops given every row
or none (scatters, TensorFlow's sparse RMSProp) are not used: a gather or
scatter switches a resource variable to copy-on-read, so that every later
read copies it.

A checkpoint holds each weight as of its last use, with the step count it
is current to (`NAMES`, `CURRENT_TO`); `caught_up` gives its value at the
checkpoint's step. One replica only: replicas that sample different
architectures would share the union of their gradients.
"""

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tunas_search.supernet import ops
from tunas_search.supernet.weights import WeightUses
from tunas_search.tf_internals import dead_gradients
from tunas_search.tf_internals import graph as tf_graph

tf1 = tf.compat.v1

SCOPE = 'deferred_rmsprop'
# Checkpoint names: the deferred weights' names, and for each the number of
# steps its value and slots are current to (its last use's step + 1).
NAMES = f'{SCOPE}/names'
CURRENT_TO = f'{SCOPE}/current_to'
# TensorFlow's RMSProp slot names (tf.compat.v1.train.RMSPropOptimizer):
# checkpoints of both forms name the slots alike.
MS_SLOT = 'RMSProp'
MOMENTUM_SLOT = 'RMSProp_1'
# Name scopes of each group's conds (read by tests of the step's order).
CATCH_UP = 'catch_up'
UPDATE = 'deferred_update'


def _base_name(name: str) -> str:
  return name.split(':')[0]


def _read_op(read: tf.Tensor) -> tf.Operation:
  """The ReadVariableOp behind a read (`read_value` adds an Identity)."""
  op = read.op
  while op.type == 'Identity':
    op = op.inputs[0].op
  if op.type != 'ReadVariableOp':
    raise ValueError(f'{read.name} is not a variable read')
  return op


def idle_factors(k, momentum: float, decay: float):
  """The factors of k zero-gradient steps: (ms's, mom's, mom-to-weight).

  `k` is a number or a float tensor; the weight moves by
  `-mom * mu * (1 - mu**k) / (1 - mu)`. The config keeps momentum below 1.
  """
  pow_ = tf.pow if isinstance(k, tf.Tensor) else np.power
  mu_k = pow_(np.float32(momentum), k)
  shift = momentum * (1 - mu_k) / (1 - momentum)
  return pow_(np.float32(decay), k), mu_k, shift


def _when(pred: tf.Tensor, make_ops: Callable[[], List[tf.Operation]],
          name: str) -> tf.Tensor:
  """Runs the ops that `make_ops` builds only if `pred`; returns `pred`.

  The ops wait on a pivot that is dead unless `pred`, and TensorFlow skips
  an op with a dead input, control inputs included; the returned Merge is
  live either way and follows the ops when they run. A `tf.cond` would also
  pass each tensor the ops read through a Switch of its own: ~8 per weight,
  each run every step, which made a step's cost grow with the number of
  op choices (`bench/step_cost.py`).
  """
  with tf.name_scope(name):
    skip, take = tf.raw_ops.Switch(data=pred, pred=pred)
    with tf.control_dependencies([tf.identity(take)]):
      done = make_ops()
    with tf.control_dependencies(done):
      ran = tf.identity(take)
    return tf.raw_ops.Merge(inputs=[ran, skip]).output


def _catch_up_ops(factors: Sequence[tf.Tensor],
                  handles: Sequence[tf.Tensor]) -> List[tf.Operation]:
  """Missed zero-gradient steps of (weight, ms, mom) handle triples.

  `factors`: `idle_factors` of the missed steps (ms's, mom's, mom-to-weight).
  """
  ms_factor, mom_factor, shift = factors
  done = []
  for i in range(0, len(handles), 3):
    var, ms, mom = handles[i:i + 3]
    m = tf.raw_ops.ReadVariableOp(resource=mom, dtype=tf.float32)
    s = tf.raw_ops.ReadVariableOp(resource=ms, dtype=tf.float32)
    done += [tf.raw_ops.AssignSubVariableOp(resource=var, value=m * shift),
             tf.raw_ops.AssignVariableOp(resource=mom, value=m * mom_factor),
             tf.raw_ops.AssignVariableOp(resource=ms, value=s * ms_factor)]
  return done


def _update_ops(learning_rate: tf.Tensor, hyper: Sequence[tf.Tensor],
                grads: Sequence[tf.Tensor],
                handles: Sequence[tf.Tensor]) -> List[tf.Operation]:
  """RMSProp steps of (weight, ms, mom) handle triples, one per gradient.

  `hyper`: RMSProp's decay, momentum and epsilon.
  """
  rho, momentum, epsilon = hyper
  return [tf.raw_ops.ResourceApplyRMSProp(
      var=handles[3 * i], ms=handles[3 * i + 1], mom=handles[3 * i + 2],
      lr=learning_rate, rho=rho, momentum=momentum, epsilon=epsilon,
      grad=grad) for i, grad in enumerate(grads)]


def _half_squared_norm(*grads: tf.Tensor) -> tf.Tensor:
  return tf.add_n([tf.nn.l2_loss(g) for g in grads])


class DeferredRMSProp:
  """TuNAS's RMSProp with the steps of unused weights taken when next used.

  Build order within a step: construct it after the training pass was built
  (`uses` recorded, `snapshots` read; the pass's decay loss with
  `dead_when_unused=uses.used_once()`), then take `gradients`, read them
  through `gradient_norms` where something must run every step, and
  `apply_gradients`. The weights of
  a group whose op scales are all 0 in a step are neither read nor updated in
  it; their reads in `snapshots` wait for their group's catch-up. A step
  whose gradients are not finite updates no weight: every weight misses a
  zero-gradient step then (TuNAS zeroes such a step's gradients and applies
  them), which the next use takes like any other missed step.

  Args:
    variables: the model weights it updates.
    uses: the training build's `WeightUses`.
    snapshots: the training build's reads (`ops.reading_snapshots`); each
      read is made to wait for its weight's catch-up.
    step: the global step read at the start of this step (int64 scalar).
    learning_rate: float32 scalar.
    decay, momentum, epsilon: RMSProp's (docs/method.md section 6).
  """

  def __init__(self, variables: Sequence[tf.Variable], uses: WeightUses,
               snapshots: Mapping[str, tf.Tensor], step: tf.Tensor,
               learning_rate: tf.Tensor, *, decay: float, momentum: float,
               epsilon: float):
    self._learning_rate = learning_rate
    # One tensor each, which every update captures (a float argument would
    # be a constant per weight: ~1,000 more graph ops).
    self._hyper = [tf.constant(x, tf.float32)
                   for x in (decay, momentum, epsilon)]
    self._step = tf.cast(step, tf.int64)
    self._slots = {}
    # Groups of weights used by the same op choices, in first-use order; the
    # weights used by every architecture form the group keyed ().
    groups: Dict[Tuple[str, ...], Tuple[List[tf.Tensor], List[tf.Variable]]] = {}
    for var in variables:
      self._slots[var.ref()] = self._create_slots(var)
      scales = uses.scales(var.name) or []
      key = tuple(s.name for s in scales)
      groups.setdefault(key, (scales, []))[1].append(var)
    ordered = [v for _, vs in groups.values() for v in vs]
    names = [_base_name(v.name) for v in ordered]
    with tf1.variable_scope(SCOPE, reuse=tf1.AUTO_REUSE):
      # Only read from checkpoints (`caught_up`): which entry of
      # `current_to` belongs to which weight.
      tf1.get_variable('names', initializer=tf.constant(names or [''],
                                                        tf.string),
                       trainable=False)
      # Step 0 is the first: every weight's initial value is current to 0.
      self._current_to = tf1.get_variable(
          'current_to', initializer=tf.zeros([max(len(ordered), 1)],
                                             tf.int64),
          trainable=False)
    # Snapshots of the weights used once, inside a choice: their gradients
    # are dead in a step that does not use them (`gradients`).
    self._dead_names = {n for n in uses.used_once() if n in snapshots}
    self._dead_reads = [snapshots[n] for n in sorted(self._dead_names)]
    self._groups = []  # (used, indices, variables, caught-up signal)
    # Each group's indices in `current_to` (a contiguous range) and whether
    # the step uses it.
    spans, used = [], []
    not_zero = {}  # One comparison per op scale, shared by its groups.
    start = 0
    for scales, group in groups.values():
      spans.append(np.arange(start, start + len(group)))
      start += len(group)
      for s in scales:
        if s.ref() not in not_zero:
          not_zero[s.ref()] = tf.not_equal(s, 0)
      flags = [not_zero[s.ref()] for s in scales]
      if not flags:
        used.append(tf.constant(True))
      elif len(flags) == 1:
        used.append(flags[0])
      else:
        used.append(tf.reduce_any(tf.stack(flags)))
    # The groups' bookkeeping as vectors: a few ops per step, not a few per
    # group (graph size and start-up; each group still has its own gates).
    self._used = tf.stack(used) if used else tf.zeros([0], tf.bool)
    missed = self._step - tf.gather(
        self._current_to, np.array([span[0] for span in spans], np.int64))
    # A group used in consecutive steps (every always-used weight, unless a
    # step was not finite) has nothing to catch up.
    needs = tf.unstack(tf.logical_and(self._used, missed > 0),
                       num=len(spans))
    factors = [tf.unstack(f, num=len(spans)) for f in idle_factors(
        tf.cast(missed, tf.float32), momentum, decay)]
    with ops.v1_control_flow():
      for g, (_, group) in enumerate(groups.values()):
        # One constant for the group's catch-up and update.
        span = tf.constant(spans[g])
        caught_up = self._catch_up(needs[g], [f[g] for f in factors], span,
                                   group)
        for var in group:
          read = snapshots.get(_base_name(var.name))
          if read is not None:
            # The read was built with the training pass, before this group
            # existed; it must still see the weight after its catch-up.
            tf_graph.add_control_input(_read_op(read), caught_up.op)
        self._groups.append((used[g], span, group, caught_up))

  def _create_slots(self, var: tf.Variable) -> Tuple[tf.Variable, tf.Variable]:
    """(mean square, momentum), named and initialised as TensorFlow's RMSProp."""
    name = _base_name(var.name)
    with tf1.variable_scope(tf1.VariableScope(tf1.AUTO_REUSE)):
      ms = tf1.get_variable(f'{name}/{MS_SLOT}', shape=var.shape,
                            initializer=tf1.ones_initializer(),
                            trainable=False)
      mom = tf1.get_variable(f'{name}/{MOMENTUM_SLOT}', shape=var.shape,
                             initializer=tf1.zeros_initializer(),
                             trainable=False)
    return ms, mom

  def _catch_up(self, needed: tf.Tensor, factors: Sequence[tf.Tensor],
                indices: tf.Tensor, group: List[tf.Variable]) -> tf.Tensor:
    """The group's missed steps, taken if `needed` (used and missed some).

    `factors`: `idle_factors` of the group's missed steps.
    """
    def catch_up():
      return [*_catch_up_ops(factors, self._handles(group)),
              # Current to this step now, also if this step's update is
              # skipped (gradients not finite), so the missed steps are not
              # taken twice.
              self._set_current_to(indices, self._step)]
    return _when(needed, catch_up, CATCH_UP)

  def _handles(self, group: Sequence[tf.Variable]) -> List[tf.Tensor]:
    """(weight, ms, mom) handles of each weight, in order."""
    handles = []
    for var in group:
      ms, mom = self._slots[var.ref()]
      handles += [var.handle, ms.handle, mom.handle]
    return handles

  def _set_current_to(self, indices: tf.Tensor,
                      value: tf.Tensor) -> tf.Operation:
    # A scalar update sets every index.
    return tf1.raw_ops.ResourceScatterUpdate(
        resource=self._current_to.handle, indices=indices, updates=value)

  def gradients(self, loss: tf.Tensor,
                variables: Sequence[tf.Variable]) -> List[Optional[tf.Tensor]]:
    """`tf.gradients(loss, variables)`, dead for weights a step leaves unused.

    The gradient of a weight used once, inside a choice, is dead (not
    zero) in a step whose architecture does not use it: neither it nor
    anything it feeds is computed (`dead_gradients`), and `apply_gradients`
    does not update such a weight anyway. Read the gradients through
    `gradient_norms` where something must run every step.
    """
    with dead_gradients.dead_when_unused(self._dead_reads):
      return tf.gradients(loss, variables)

  def gradient_norms(self, grads_and_vars) -> List[tf.Tensor]:
    """Half the squared norm of each group's gradients, live every step.

    What the finite check and the gradient-sync barrier read in place of
    gradients that may be dead: a group's value is half the squared norm of
    its gradients in a step that uses it, and 0 in one that does not (for a
    group a step may leave unused, `dead_gradients.or_zero` of its norm).

    Args:
      grads_and_vars: as `apply_gradients`.

    Returns:
      float32 scalars, one per group with a gradient.
    """
    grads = {v.ref(): g for g, v in grads_and_vars if g is not None}
    norms = []
    for used, _, group, _ in self._groups:
      parts = [grads[v.ref()] for v in group if v.ref() in grads]
      if not parts:
        continue
      norm = _half_squared_norm(*parts)
      if any(_base_name(v.name) in self._dead_names for v in group):
        norm = dead_gradients.or_zero(norm, used)
      norms.append(norm)
    return norms

  def apply_gradients(self, grads_and_vars, finite: tf.Tensor
                      ) -> tf.Operation:
    """Updates the groups the step uses, if its gradients are finite.

    Args:
      grads_and_vars: a gradient (or None) for each weight given at
        construction.
      finite: bool scalar, whether the loss and every gradient are finite;
        when not, no weight is updated (each misses a zero-gradient step).

    Returns:
      The update op.
    """
    grads = {v.ref(): g for g, v in grads_and_vars}
    updates = []
    takes = tf.unstack(tf.logical_and(self._used, finite),
                       num=len(self._groups))
    next_step = self._step + 1
    learning_rate = tf.convert_to_tensor(self._learning_rate, tf.float32)
    with ops.v1_control_flow():
      for take, (_, indices, group, caught_up) in zip(takes, self._groups):
        pairs = [(grads[v.ref()], v) for v in group
                 if grads.get(v.ref()) is not None]

        def update(pairs=pairs, indices=indices):
          done = _update_ops(learning_rate, self._hyper,
                             [g for g, _ in pairs],
                             self._handles([v for _, v in pairs]))
          with tf.control_dependencies(done):
            done.append(self._set_current_to(indices, next_step))
          return done
        with tf.control_dependencies([caught_up]):
          updates.append(_when(take, update, UPDATE).op)
    return tf.group(*updates, name='deferred_rmsprop_update')


def caught_up(values: Mapping[str, np.ndarray], reader, step: int,
              momentum: float, decay: float) -> Dict[str, np.ndarray]:
  """`values` read from a checkpoint, moved to the checkpoint's step.

  A weight whose RMSProp steps were deferred (its name is in the
  checkpoint's `NAMES`) takes the steps it missed since its last use, in
  closed form (module docstring); others are returned as they are.

  Args:
    values: weight values by name, read from the checkpoint.
    reader: the checkpoint's `tf.train.load_checkpoint` reader.
    step: the checkpoint's global step.
    momentum, decay: the search's RMSProp settings.

  Returns:
    The values the weights have at `step` under TuNAS's optimiser.
  """
  if not reader.has_tensor(NAMES):
    return dict(values)
  names = [n.decode() for n in reader.get_tensor(NAMES)]
  current_to = reader.get_tensor(CURRENT_TO)
  out = dict(values)
  for name, since in zip(names, current_to):
    if name not in values:
      continue
    missed = step - int(since)
    if missed <= 0:
      continue
    mom = reader.get_tensor(f'{name}/{MOMENTUM_SLOT}')
    _, _, shift = idle_factors(np.float32(missed), momentum, decay)
    out[name] = (values[name] - mom * np.float32(shift)).astype(
        values[name].dtype)
  return out
