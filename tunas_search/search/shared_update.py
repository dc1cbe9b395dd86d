"""The shared weights' RMSProp step: one interface, TuNAS's form and ours.

Step 2 of a search step (docs/method.md section 6): the shared weights take
one RMSProp step on the training batch, through the sampled architecture.
`EveryStepUpdate` is TuNAS's optimiser: every weight takes a step every step,
the ones the architecture leaves unused on their momentum. `DeferredUpdate`
updates only what the architecture uses and takes an unused weight's missed
steps in closed form when it is next used (`supernet.DeferredRMSProp`;
docs/method.md, "Deferred steps of unused weights"). The step plan picks one
(`for_plan`); the step calls either the same way:

  update = for_plan(config, plan)
  logits = build_network(..., update.form, uses=update.uses)  # training pass
  loss = empirical_loss + update.decay_loss(decay, weight_decay)
  grads_and_vars = update.gradients(loss, variables, step, learning_rate)
  finite, grads_and_vars = update.check_finite(empirical_loss, grads_and_vars)
  train_op = update.apply(grads_and_vars, finite)  # after its sync_tensors

A step whose loss or gradients are not finite moves no weight by a
non-finite amount (`nonfinite`).
"""

import abc
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from tunas_search.search import nonfinite
from tunas_search import supernet
from tunas_search.config import SearchConfig
from tunas_search.config import plan as plan_lib
from tunas_search.runtime import replicas
from tunas_search.supernet import forms

tf1 = tf.compat.v1
GradsAndVars = List[Tuple[Optional[tf.Tensor], tf.Variable]]


class SharedWeightUpdate(abc.ABC):
  """One RMSProp step of the shared weights (module docstring).

  Attributes:
    form: the form the training pass is built in (`supernet.forms`).
    uses: what the training pass must record its weights' uses in, or None.
  """

  def __init__(self, config: SearchConfig, form: forms.Form):
    self._config = config
    self.form = form
    self.uses: Optional[supernet.WeightUses] = None

  def training_snapshots(self, validation_snapshots: Optional[Dict]
                         ) -> Optional[Dict[str, tf.Tensor]]:
    """The weight reads the training pass computes with (`reading_snapshots`):
    the validation pass's (pre_update validation), else None."""
    return validation_snapshots

  def decay_loss(self, decay: supernet.MaskedWeightDecay,
                 weight_decay: float) -> tf.Tensor:
    """The masked weight decay of what the architecture uses."""
    return decay.loss(weight_decay)

  @abc.abstractmethod
  def gradients(self, loss: tf.Tensor, variables: Sequence[tf.Variable],
                step: tf.Tensor, learning_rate: tf.Tensor) -> GradsAndVars:
    """The weights' gradients of `loss`.

    Args:
      loss: the training loss (empirical plus decay).
      variables: the shared weights.
      step: the global step read at the start of this step.
      learning_rate: float32 scalar, this step's.
    """

  @abc.abstractmethod
  def check_finite(self, empirical_loss: tf.Tensor,
                   grads_and_vars: GradsAndVars
                   ) -> Tuple[tf.Tensor, GradsAndVars]:
    """Whether the loss and the gradients are finite, and the gradients to
    apply."""

  @abc.abstractmethod
  def sync_tensors(self, grads_and_vars: GradsAndVars) -> List[tf.Tensor]:
    """What the gradient-sync barrier waits for: every gradient, in effect."""

  @abc.abstractmethod
  def apply(self, grads_and_vars: GradsAndVars,
            finite: tf.Tensor) -> tf.Operation:
    """The update op (it does not increment the global step)."""


class EveryStepUpdate(SharedWeightUpdate):
  """TuNAS's RMSProp: every weight takes a step every step.

  A weight the architecture does not use has a zero gradient (its op choice
  is a cond, `forms.every_step`; its decay is masked), so it moves on its
  momentum. A non-finite step's gradients are zeroed, and the step applied.
  Cross-shard on TPU (`replicas.model_optimizer`).
  """

  def __init__(self, config: SearchConfig, form: forms.Form):
    super().__init__(config, form)
    self._optimizer = None

  def gradients(self, loss, variables, step, learning_rate):
    del step  # The optimizer's slots hold what it needs.
    self._optimizer = replicas.model_optimizer(self._config, learning_rate)
    # GATE_NONE (and tf.gradients' default): the optimiser's default
    # (GATE_OP) groups the input gradients of every multi-input op with a
    # NoOp and an Identity per gradient, which only orders their computation
    # (values are the same; resource variable updates never race with
    # reads); the barrier orders the update after every gradient when on.
    return self._optimizer.compute_gradients(
        loss, var_list=list(variables),
        gate_gradients=tf1.train.Optimizer.GATE_NONE)

  def check_finite(self, empirical_loss, grads_and_vars):
    # The weight decay term needs no check of its own: a non-finite weight
    # makes its gradient non-finite, and an overflowing term still makes the
    # reported loss NaN. Leaving it out keeps XLA from copying the whole
    # decay sum into each variable's update fusion (docs/xla.md, "Where the
    # time goes").
    finite = nonfinite.all_finite(empirical_loss, grads_and_vars)
    return finite, nonfinite.finite_or_zero(grads_and_vars, finite)

  def sync_tensors(self, grads_and_vars):
    return [g for g, _ in grads_and_vars if g is not None]

  def apply(self, grads_and_vars, finite):
    del finite  # The gradients are zero then.
    return self._optimizer.apply_gradients(grads_and_vars)


class DeferredUpdate(SharedWeightUpdate):
  """Only what the architecture uses is updated; the rest catches up when
  next used (`supernet.DeferredRMSProp`). One replica off TPU: no
  cross-shard loss scaling applies to its gradients.

  The training pass has no conds (`forms.deferred`): the gradients of the
  weights of an unselected choice are dead, neither computed nor applied,
  and what runs every step (the finite check, the barrier) reads one
  scalar per group of weights instead. A non-finite step updates nothing.
  """

  def __init__(self, config: SearchConfig, form: forms.Form):
    super().__init__(config, form)
    self.uses = supernet.WeightUses()
    self._snapshots: Dict[str, tf.Tensor] = {}
    self._optimizer: Optional[supernet.DeferredRMSProp] = None
    self._norms: List[tf.Tensor] = []

  def training_snapshots(self, validation_snapshots):
    # The catch-ups are ordered before the training pass's reads, which must
    # be snapshots (post_update validation reads the weights after the
    # update instead).
    if validation_snapshots is not None:
      self._snapshots = validation_snapshots
    return self._snapshots

  def decay_loss(self, decay, weight_decay):
    # A weight the step does not use is not updated, so its decay term (0
    # then) need not be computed either.
    return decay.loss(weight_decay, self.uses.used_once())

  def gradients(self, loss, variables, step, learning_rate):
    c = self._config
    self._optimizer = supernet.DeferredRMSProp(
        variables, self.uses, self._snapshots, step, learning_rate,
        decay=c.model_rmsprop_decay, momentum=c.model_momentum,
        epsilon=c.model_rmsprop_epsilon)
    return list(zip(self._optimizer.gradients(loss, variables), variables))

  def check_finite(self, empirical_loss, grads_and_vars):
    self._norms = self._optimizer.gradient_norms(grads_and_vars)
    finite = nonfinite.all_finite(empirical_loss,
                                  half_squared_norms=self._norms)
    return finite, grads_and_vars

  def sync_tensors(self, grads_and_vars):
    del grads_and_vars  # Dead for unused weights: their groups' norms.
    return self._norms

  def apply(self, grads_and_vars, finite):
    return self._optimizer.apply_gradients(grads_and_vars, finite)


def for_plan(config: SearchConfig,
             plan: plan_lib.StepPlan) -> SharedWeightUpdate:
  """The update the plan names, with the form of its training pass."""
  if plan.shared_update == plan_lib.DEFERRED:
    return DeferredUpdate(config, forms.deferred(plan.width_form))
  return EveryStepUpdate(config, forms.xla() if plan.xla
                         else forms.every_step(plan.width_form))
