"""The shared weights' RMSProp step: two calls, TuNAS's form and ours.

Step 2 of a search step (docs/method.md section 6): the shared weights take
one RMSProp step on the training batch, through the sampled architecture.
`EveryStepUpdate` is TuNAS's optimiser: every weight takes a step every step,
the ones the architecture leaves unused on their momentum. `DeferredUpdate`
updates only what the architecture uses and takes an unused weight's missed
steps in closed form when it is next used (`supernet.DeferredRMSProp`;
docs/method.md, "Deferred steps of unused weights"). The step plan picks one
(`for_plan`); the step calls either the same way, values in and values out:

  update = for_plan(config, plan)
  forward = update.forward(masked_spec, images)     # the training pass
  loss = empirical_loss + forward.regularization_loss
  train_op, finite = update.step(loss, empirical_loss, forward, variables,
                                 step, learning_rate)

The update object holds only settings (the config's RMSProp, the plan's
form, layout and barrier); everything one call leaves for the next is in
`Forward`. A step whose loss or gradients are not finite moves no weight by
a non-finite amount (`nonfinite`).
"""

import abc
import contextlib
from typing import List, Mapping, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from tunas_search.search import nonfinite
from tunas_search import supernet
from tunas_search.config import SearchConfig
from tunas_search.config import plan as plan_lib
from tunas_search.runtime import replicas
from tunas_search.supernet import forms

tf1 = tf.compat.v1
GradsAndVars = List[Tuple[Optional[tf.Tensor], tf.Variable]]


class Forward(NamedTuple):
  """What the training pass computed, and what its update needs of it.

  Attributes:
    logits: float32 [N, num_classes].
    regularization_loss: float32 scalar, the masked weight decay of what
      the architecture uses (docs/method.md).
    reads: weight name -> the one read of that weight the pass computed
      with (`supernet.reading_snapshots`); empty when the pass read the
      variables themselves. The pre_update validation pass computes with
      the same reads.
    uses: the weights' op scales the pass recorded (deferred form), or None.
  """
  logits: tf.Tensor
  regularization_loss: tf.Tensor
  reads: Mapping[str, tf.Tensor]
  uses: Optional[supernet.WeightUses]


def network(config: SearchConfig, plan: plan_lib.StepPlan, form: forms.Form,
            masked_spec, images: tf.Tensor,
            reads: Optional[Mapping[str, tf.Tensor]],
            decay: Optional[supernet.MaskedWeightDecay] = None,
            uses: Optional[supernet.WeightUses] = None
            ) -> Tuple[tf.Tensor, Mapping[str, tf.Tensor]]:
  """The weight-shared network with batch-statistics BN (docs/method.md).

  Args:
    config: the search config (number of classes).
    plan: the step plan (compute dtype).
    form: the form to build in.
    masked_spec: the model spec with a tensor mask on every decision.
    images: float32 [N, H, W, C].
    reads: None to compute with the variables; else every shared weight is
      read once, starting from these reads, and the pass computes with them.
    decay, uses: filled by the build (`supernet.build_network`).

  Returns:
    float32 logits [N, num_classes], and the reads the pass computed with
    (`reads` and any new ones; empty when `reads` is None).
  """
  own = {} if reads is None else dict(reads)
  with contextlib.ExitStack() as stack:
    if reads is not None:
      stack.enter_context(supernet.reading_snapshots(own))
    logits = supernet.build_network(
        masked_spec, images, config.num_classes, form,
        dtype=tf.as_dtype(plan.compute_dtype), decay=decay, uses=uses)
  return logits, own


def after(grads_and_vars: GradsAndVars,
           deps: List[tf.Tensor]) -> GradsAndVars:
  """The gradients, available only once every tensor in `deps` is.

  With all gradients in `deps` this is the gradient-sync barrier: no weight
  is updated before every gradient exists. With the weight reads in
  `deps`, no weight is updated before every read has been made.
  """
  if not deps:
    return grads_and_vars
  # One NoOp gathers the dependencies and every gradient waits on it: the
  # same order with len(deps) + len(grads) control edges instead of their
  # product, which slowed graph building and Grappler by tens of seconds.
  with tf.control_dependencies(deps):
    barrier = tf.no_op(name='gradient_sync_barrier')
  with tf.control_dependencies([barrier]):
    return [(None if g is None else tf.identity(g), v)
            for g, v in grads_and_vars]


class SharedWeightUpdate(abc.ABC):
  """One RMSProp step of the shared weights (module docstring).

  Attributes:
    form: the form the training pass is built in (`StepPlan.training_form`).
  """

  def __init__(self, config: SearchConfig, plan: plan_lib.StepPlan):
    self._config = config
    self._plan = plan
    self.form = forms.named(plan.training_form, plan.width_form)

  def _reads_once(self) -> bool:
    """Whether the training pass computes with one read of each weight:
    pre_update validation scores the batch with those reads."""
    return self._plan.validation_weights == 'pre_update'

  def forward(self, masked_spec, images: tf.Tensor) -> Forward:
    """The training pass through the architecture `masked_spec` masks.

    Args:
      masked_spec: the model spec with a tensor mask on every decision.
      images: float32 [N, H, W, C], the training batch.
    """
    decay = supernet.MaskedWeightDecay()
    uses = supernet.WeightUses() if self.form.records_uses else None
    logits, reads = network(self._config, self._plan, self.form, masked_spec,
                            images, {} if self._reads_once() else None,
                            decay, uses)
    return Forward(logits, self._decay_loss(decay, uses), reads, uses)

  def _decay_loss(self, decay: supernet.MaskedWeightDecay,
                  uses: Optional[supernet.WeightUses]) -> tf.Tensor:
    del uses  # Every weight is stepped, so every term counts.
    return decay.loss(self._config.weight_decay)

  def _barrier(self, forward: Forward,
               every_gradient: List[tf.Tensor]) -> List[tf.Tensor]:
    """What no weight update may precede: the pre_update reads (the
    validation pass computes with them) and, with the barrier on, every
    gradient (`every_gradient`, or what stands for them)."""
    deps = (list(forward.reads.values())
            if self._plan.validation_weights == 'pre_update' else [])
    if self._plan.gradient_sync_barrier:
      deps += every_gradient
    return deps

  @abc.abstractmethod
  def step(self, loss: tf.Tensor, empirical_loss: tf.Tensor,
           forward: Forward, variables: Sequence[tf.Variable],
           step: tf.Tensor, learning_rate: tf.Tensor
           ) -> Tuple[tf.Operation, tf.Tensor]:
    """The update of `variables` on `loss`'s gradients.

    Args:
      loss: the training loss (empirical plus `forward`'s decay).
      empirical_loss: its cross-entropy term, checked for finiteness.
      forward: `forward`'s output for this step.
      variables: the shared weights.
      step: the global step read at the start of this step.
      learning_rate: float32 scalar, this step's.

    Returns:
      The update op (it does not increment the global step) and a bool
      scalar: whether the loss and the gradients were finite.
    """


class EveryStepUpdate(SharedWeightUpdate):
  """TuNAS's RMSProp: every weight takes a step every step.

  A weight the architecture does not use has a zero gradient (its op choice
  is a cond, `forms.every_step`; its decay is masked), so it moves on its
  momentum. A non-finite step's gradients are zeroed, and the step applied.
  Cross-shard on TPU (`replicas.model_optimizer`).
  """

  def step(self, loss, empirical_loss, forward, variables, step,
           learning_rate):
    del step  # The optimizer's slots hold what it needs.
    optimizer = replicas.model_optimizer(
        self._config, learning_rate, cross_shard=self._plan.layout.use_tpu)
    # GATE_NONE (and tf.gradients' default): the optimiser's default
    # (GATE_OP) groups the input gradients of every multi-input op with a
    # NoOp and an Identity per gradient, which only orders their computation
    # (values are the same; resource variable updates never race with
    # reads); the barrier orders the update after every gradient when on.
    grads_and_vars = optimizer.compute_gradients(
        loss, var_list=list(variables),
        gate_gradients=tf1.train.Optimizer.GATE_NONE)
    # The weight decay term needs no check of its own: a non-finite weight
    # makes its gradient non-finite, and an overflowing term still makes the
    # reported loss NaN. Leaving it out keeps XLA from copying the whole
    # decay sum into each variable's update fusion (docs/xla.md, "Where the
    # time goes").
    finite = nonfinite.all_finite(empirical_loss, grads_and_vars)
    grads_and_vars = nonfinite.finite_or_zero(grads_and_vars, finite)
    deps = self._barrier(forward, [g for g, _ in grads_and_vars
                                   if g is not None])
    # The gradients are zero when not finite: the step is applied anyway.
    return optimizer.apply_gradients(after(grads_and_vars, deps)), finite


class DeferredUpdate(SharedWeightUpdate):
  """Only what the architecture uses is updated; the rest catches up when
  next used (`supernet.DeferredRMSProp`). One replica off TPU: no
  cross-shard loss scaling applies to its gradients.

  The training pass has no conds (`forms.deferred`): the gradients of the
  weights of an unselected choice are dead, neither computed nor applied,
  and what runs every step (the finite check, the barrier) reads one
  scalar per group of weights instead. A non-finite step updates nothing.
  """

  def _reads_once(self):
    # The catch-ups are ordered before the training pass's reads, which must
    # be one read per weight whatever the validation weights (post_update
    # validation reads the weights after the update instead).
    return True

  def _decay_loss(self, decay, uses):
    # A weight the step does not use is not updated, so its decay term (0
    # then) need not be computed either.
    return decay.loss(self._config.weight_decay, uses.used_once())

  def step(self, loss, empirical_loss, forward, variables, step,
           learning_rate):
    c = self._config
    optimizer = supernet.DeferredRMSProp(
        variables, forward.uses, forward.reads, step, learning_rate,
        decay=c.model_rmsprop_decay, momentum=c.model_momentum,
        epsilon=c.model_rmsprop_epsilon)
    grads_and_vars = list(zip(optimizer.gradients(loss, variables),
                              variables))
    # Dead for unused weights: the finite check and the barrier read the
    # groups' norms instead.
    norms = optimizer.gradient_norms(grads_and_vars)
    finite = nonfinite.all_finite(empirical_loss, half_squared_norms=norms)
    deps = self._barrier(forward, norms)
    return optimizer.apply_gradients(after(grads_and_vars, deps),
                                     finite), finite


def for_plan(config: SearchConfig,
             plan: plan_lib.StepPlan) -> SharedWeightUpdate:
  """The update the plan names, with the form of its training pass."""
  if plan.shared_update == plan_lib.DEFERRED:
    return DeferredUpdate(config, plan)
  return EveryStepUpdate(config, plan)
