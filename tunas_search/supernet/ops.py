"""Layer primitives of the builder: variables, BN, convolutions, op switches.

Variables are created with `tf.compat.v1.get_variable` (AUTO_REUSE) at build
time, outside any `tf.cond`; the returned apply functions only read them, so
they may run inside conditional branches.
"""

import contextlib
import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from tunas_search.supernet import weights
from tunas_search.tf_internals import dead_gradients
from tunas_search.tf_internals import graph as tf_graph

# docs/method.md section 2: BN epsilon 0.001 and stand-alone momentum 0.99.
BN_EPSILON = 1e-3
BN_MOMENTUM = 0.99
BATCH_NORM_MODES = ('batch', 'stateful')
# Activations with f(c * x) = c * f(x) for c >= 0: a mask entry can be folded
# into the BN scale and offset in front of them, saving a multiply.
_HOMOGENEOUS = ('relu', 'identity')
# Activations with f(0) == 0 keep masked-off channels at zero.
_ZERO_AT_ZERO = ('relu', 'relu6', 'swish6', 'identity')
# Standard deviation of a unit-variance normal truncated at two standard
# deviations; variance-scaling initialisers divide by it.
_TRUNCATED_NORMAL_STDDEV = 0.87962566103423978


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """Settings shared by every layer of one `build_network` call.

  Attributes:
    is_training: training graph (dropout, path dropout, BN updates).
    batch_norm_mode: 'batch' (always batch statistics) or 'stateful'.
    dtype: compute dtype, tf.float32 or tf.bfloat16.
    path_dropout_rate: stochastic-depth drop probability of residual branches.
    filters_base: rounding base of widths.
    in_cond: building a branch of a conditional op choice.
    op_scale: float32 scalar, the product of the op mask entries of every
      searched choice enclosing the layer being built (None outside any);
      it scales the layer's weight decay (docs/method.md, "Weight decay").
    decay: collects the masked weight-decay terms of this build, or None.
    sampled_widths: compute searched widths at their sampled size instead of
      masking the largest (`widths.WIDTH_FORMS`).
    uses: records each variable's op scales (`weights.WeightUses`), or None.
    dead_branches: build each op choice's branch on its routed input alone,
      without a cond (`switch`): an unselected branch is dead throughout,
      and so are the gradients of the weights it reads.
  """
  is_training: bool
  batch_norm_mode: str
  dtype: tf.DType
  path_dropout_rate: float = 0.0
  filters_base: int = 8
  in_cond: bool = False
  op_scale: Optional[tf.Tensor] = None
  decay: Optional['weights.MaskedWeightDecay'] = None
  sampled_widths: bool = False
  uses: Optional['weights.WeightUses'] = None
  dead_branches: bool = False

  def record(self, scope: str, *names: str) -> None:
    """Records `scope/name` for each name as used under `op_scale`."""
    if self.uses is not None:
      for name in names:
        self.uses.add(f'{scope}/{name}', self.op_scale)


@dataclasses.dataclass(frozen=True)
class BatchNormVars:
  """Variables of one batch normalisation, all float32 [channels].

  The moving statistics exist only in 'stateful' mode: search-mode BN never
  uses them (docs/method.md section 4), and skipping them halves the BN variables.
  """
  gamma: tf.Variable
  beta: tf.Variable
  moving_mean: Optional[tf.Variable] = None
  moving_variance: Optional[tf.Variable] = None


def he_initializer(fan_in: int):
  """Truncated normal with variance 2 / fan_in (He et al. 2015)."""
  stddev = math.sqrt(2.0 / fan_in) / _TRUNCATED_NORMAL_STDDEV
  return tf.compat.v1.truncated_normal_initializer(stddev=stddev)


def get_var(scope: str, name: str, shape: Sequence[int], initializer,
            trainable: bool = True) -> tf.Variable:
  """A float32 variable `scope/name`, shared across calls (AUTO_REUSE)."""
  with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
    return tf.compat.v1.get_variable(
        name, shape=list(shape), dtype=tf.float32, initializer=initializer,
        trainable=trainable)


@contextlib.contextmanager
def reading_snapshots(snapshots: Dict[str, tf.Tensor]):
  """While active, `get_var` returns one read of each trainable variable.

  TuNAS reads every shared weight once per step and computes with that
  snapshot in both the training and the validation pass (docs/method.md,
  "Which weights score the validation batch"). The first request for a
  trainable variable reads it and stores the read in `snapshots` (by
  variable name); later requests, from this or another build sharing the
  dict, get the same tensor. Gradients flow through the read to the variable,
  and an update applied after the read leaves the read's value unchanged.
  Non-trainable variables are returned as they are.

  Args:
    snapshots: name -> read tensor; shared by the builds of one step.
  """
  def snapshot_getter(getter, *args, **kwargs):
    var = getter(*args, **kwargs)
    if not kwargs.get('trainable', True):
      return var
    name = var.name.split(':')[0]
    if name not in snapshots:
      snapshots[name] = var.read_value()
    return snapshots[name]

  with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                   custom_getter=snapshot_getter):
    yield


def conv_kernel(scope: str, kernel_size: int, in_channels: int,
                out_channels: int) -> tf.Variable:
  """A [k, k, in, out] He-normal kernel `scope/kernel` (docs/method.md section 2)."""
  fan_in = kernel_size * kernel_size * in_channels
  return get_var(scope, 'kernel',
                 [kernel_size, kernel_size, in_channels, out_channels],
                 he_initializer(fan_in))


def depthwise_kernel(scope: str, kernel_size: int,
                     channels: int) -> tf.Variable:
  """A [k, k, channels, 1] kernel; fan-in is k*k (docs/method.md section 2)."""
  return get_var(scope, 'kernel', [kernel_size, kernel_size, channels, 1],
                 he_initializer(kernel_size * kernel_size))


def bias(scope: str, channels: int) -> tf.Variable:
  """A zero-initialised bias `scope/bias`."""
  return get_var(scope, 'bias', [channels], tf.compat.v1.zeros_initializer())


def batch_norm_vars(scope: str, channels: int,
                    ctx: BuildContext) -> BatchNormVars:
  """Creates (or reuses) the variables of one BN.

  `gamma` and `beta` always; `moving_mean` and `moving_variance`
  (non-trainable) in 'stateful' mode only.

  Raises:
    ValueError: for stateful training BN inside a conditional op choice,
      whose moving-average updates could not run reliably.
  """
  if ctx.in_cond and ctx.batch_norm_mode == 'stateful' and ctx.is_training:
    raise ValueError(
        f'{scope}: stateful batch norm cannot be trained inside a searched op '
        f'choice; use batch_norm_mode="batch" for supernets (docs/method.md section 4)')
  ones = tf.compat.v1.ones_initializer()
  zeros = tf.compat.v1.zeros_initializer()
  gamma = get_var(scope, 'gamma', [channels], ones)
  beta = get_var(scope, 'beta', [channels], zeros)
  if ctx.batch_norm_mode != 'stateful':
    return BatchNormVars(gamma, beta)
  return BatchNormVars(
      gamma, beta,
      moving_mean=get_var(scope, 'moving_mean', [channels], zeros, False),
      moving_variance=get_var(scope, 'moving_variance', [channels], ones,
                              False))


def batch_norm(x: tf.Tensor, bn: BatchNormVars, ctx: BuildContext,
               scale: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Batch normalisation whose output is multiplied by `scale`.

  Args:
    x: [N, H, W, C] in the compute dtype.
    bn: the variables.
    ctx: build settings.
    scale: optional float32 scalar or [C] factor (channel mask times op mask
      entry), folded into gamma and beta so masking costs no extra pass.

  Returns:
    [N, H, W, C] in x's dtype.
  """
  gamma, beta = tf.convert_to_tensor(bn.gamma), tf.convert_to_tensor(bn.beta)
  if scale is not None:
    gamma, beta = gamma * scale, beta * scale
  use_batch = ctx.batch_norm_mode == 'batch' or ctx.is_training
  if use_batch:
    y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
        x, gamma, beta, epsilon=BN_EPSILON, is_training=True)
    if ctx.batch_norm_mode == 'stateful':
      _add_moving_average_updates(bn, mean, variance)
    return y
  y, _, _ = tf.compat.v1.nn.fused_batch_norm(
      x, gamma, beta, mean=tf.convert_to_tensor(bn.moving_mean),
      variance=tf.convert_to_tensor(bn.moving_variance), epsilon=BN_EPSILON,
      is_training=False)
  return y


def _add_moving_average_updates(bn: BatchNormVars, mean: tf.Tensor,
                                variance: tf.Tensor) -> None:
  """Adds `moving -= (1 - momentum) * (moving - batch)` to UPDATE_OPS.

  `variance` is the fused op's Bessel-corrected batch variance.
  """
  decay = 1.0 - BN_MOMENTUM
  for var, value in ((bn.moving_mean, mean), (bn.moving_variance, variance)):
    update = var.assign_sub((tf.convert_to_tensor(var) - value) * decay)
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, update)


def activation(x: tf.Tensor, name: str) -> tf.Tensor:
  """relu, relu6, swish6 (x * relu6(x + 3) / 6), sigmoid or identity."""
  if name == 'relu':
    return tf.nn.relu(x)
  if name == 'relu6':
    return tf.nn.relu6(x)
  if name == 'swish6':
    return x * (tf.nn.relu6(x + 3.0) * (1.0 / 6.0))
  if name == 'sigmoid':
    return tf.sigmoid(x)
  if name == 'identity':
    return x
  raise ValueError(f'unknown activation {name!r}')


def combine(*factors: Optional[tf.Tensor]) -> Optional[tf.Tensor]:
  """The product of the factors that are not None (None if all are)."""
  present = [f for f in factors if f is not None]
  if not present:
    return None
  out = present[0]
  for f in present[1:]:
    out = out * f
  return out


def bn_activation(x: tf.Tensor, bn: BatchNormVars, ctx: BuildContext,
                  name: str, mask: Optional[tf.Tensor],
                  coef: Optional[tf.Tensor]) -> tf.Tensor:
  """`coef * mask * activation(BN(x))`, folding factors into BN when exact."""
  if name in _HOMOGENEOUS:
    return activation(batch_norm(x, bn, ctx, combine(mask, coef)), name)
  y = activation(batch_norm(x, bn, ctx, mask), name)
  factor = combine(None if name in _ZERO_AT_ZERO else mask, coef)
  return y if factor is None else y * tf.cast(factor, y.dtype)


def conv2d(x: tf.Tensor, kernel: tf.Variable, strides: int = 1) -> tf.Tensor:
  """SAME convolution in x's dtype (the float32 kernel is cast on use)."""
  return tf.nn.conv2d(x, tf.cast(kernel, x.dtype), strides, 'SAME')


def depthwise_conv2d(x: tf.Tensor, kernel: tf.Variable,
                     strides: int = 1) -> tf.Tensor:
  """SAME depthwise convolution in x's dtype."""
  return tf.nn.depthwise_conv2d(x, tf.cast(kernel, x.dtype),
                                [1, strides, strides, 1], 'SAME')


def scaled(x: tf.Tensor, factor: Optional[tf.Tensor]) -> tf.Tensor:
  """`x * factor` (factor float32, broadcast), or x when factor is None."""
  return x if factor is None else x * tf.cast(factor, x.dtype)


def zeros_like_output(x: tf.Tensor, strides: int, channels) -> tf.Tensor:
  """Zeros shaped like a SAME layer's output: [N, ceil(H/s), ceil(W/s), C].

  `channels` is an int, or an int32 scalar for a sampled width.
  """
  height, width = (-(-int(d) // strides) for d in x.shape[1:3])
  return tf.zeros([tf.shape(x)[0], height, width, channels], x.dtype)


Branch = Tuple[tf.Tensor, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]]


def _first_active(x: tf.Tensor, branches: List[Branch], active: List[tf.Tensor],
                  zeros_fn: Callable[[], tf.Tensor]) -> tf.Tensor:
  """The output of the first active branch (nested conds), else zeros."""
  if not branches:
    return zeros_fn()
  (coef, fn), rest = branches[0], branches[1:]
  return tf.cond(active[0], lambda: fn(x, coef),
                 lambda: _first_active(x, rest, active[1:], zeros_fn))


def _nested_switch(x: tf.Tensor, branches: List[Branch],
                   base: Optional[tf.Tensor],
                   zeros_fn: Callable[[tf.Tensor], tf.Tensor]) -> tf.Tensor:
  """`switch` as nested `tf.cond`s: the form for functional (v2) conds.

  Without a base, nested conds compute the first active branch, so no zero
  tensor is filled unless every entry is 0; each further active branch (op
  warm-up) is added by a `tf.cond` that otherwise passes the sum through.
  """
  active = [coef > 0 for coef, _ in branches]
  if base is None:
    total = _first_active(x, branches, active, lambda: zeros_fn(x))
    # Branch i is added below only if an earlier branch was the first one.
    seen = active[0]
    pending = [tf.constant(False)]
    for a in active[1:]:
      pending.append(tf.logical_and(a, seen))
      seen = tf.logical_or(seen, a)
    active = pending
  else:
    total = base
  for i, (pred, (coef, fn)) in enumerate(zip(active, branches)):
    if base is None and i == 0:
      continue
    total = tf.cond(pred, lambda t=total, c=coef, f=fn: t + f(x, c),
                    lambda t=total: tf.identity(t))
  return total


def _route(x: tf.Tensor, active: List[tf.Tensor]
           ) -> Tuple[List[tf.Tensor], tf.Tensor]:
  """Routes x to every active branch: (one input per branch, none's input).

  Input i is x if branch i is active and dead otherwise (TensorFlow's
  dead-tensor propagation skips every op it reaches); the second output is x
  when no branch is active. Every routed tensor has consumers whose gradient
  is a Switch or Merge, so x's gradient is the sum of the active branches'
  alone: an inactive branch contributes no zero tensor of x's size (a cond
  capturing x would, and the zeros' sum grew the backward pass with the
  number of choices).
  """
  # rest[i]: whether a branch after i is active (the chain goes on).
  rest = [tf.constant(False)] * len(active)
  for i in range(len(active) - 2, -1, -1):
    rest[i] = tf.logical_or(active[i + 1], rest[i + 1])
  taps, none = [], None
  for i, a in enumerate(active):
    skip, take = tf.raw_ops.Switch(data=x, pred=a)
    if i == 0:
      none = skip  # Live only if branch 0 is inactive; narrowed below.
    if i == len(active) - 1:
      taps.append(take)
      break
    # Both outputs of each Switch feed a Merge: no unused output whose
    # gradient would be a zero tensor.
    take_last, take_more = tf.raw_ops.Switch(data=take, pred=rest[i])
    skip_none, skip_more = tf.raw_ops.Switch(data=skip, pred=rest[i])
    taps.append(tf.raw_ops.Merge(inputs=[take_last, take_more]).output)
    if i == 0:
      none = skip_none
    x = tf.raw_ops.Merge(inputs=[take_more, skip_more]).output
  return taps, none


def _dead_zeros(x: tf.Tensor, zeros_fn: Callable[[tf.Tensor], tf.Tensor]
                ) -> tf.Tensor:
  """`zeros_fn(x)`, not differentiable, and dead whenever x is."""
  with tf.control_dependencies([tf.identity(x)]):
    return tf.stop_gradient(zeros_fn(x))


def _routed_switch(x: tf.Tensor, branches: List[Branch],
                   base: Optional[tf.Tensor],
                   zeros_fn: Callable[[tf.Tensor], tf.Tensor],
                   conds: bool = True) -> tf.Tensor:
  """`switch` as branches between Switch/Merge routing.

  The routing ops are built outside any control-flow context (their
  gradients are `dead_gradients.routing()`'s). With `conds`, each branch is
  a `tf.cond` in the caller's context, so a weight it reads still gets a
  zero gradient when the branch is inactive (TuNAS's optimiser steps every
  weight), also inside an enclosing op choice. Without, each branch is
  built on its routed input, and every op of it waits on that input: an
  inactive branch is dead throughout, its weights' gradients too, and costs
  no Switch per tensor it reads nor a cond's Merge and pivots (~25 graph
  nodes per choice; a step's nodes cost about as much dead as live).
  """
  active = [coef > 0 for coef, _ in branches]

  def context_free(fn, *args):
    with tf_graph.outside_control_flow(), dead_gradients.routing():
      return fn(*args)

  taps, none = context_free(_route, x, active)
  outputs = []
  for tap, a, (coef, fn) in zip(taps, active, branches):
    if not conds:
      # The control edge also kills what reads no activation: a weight's
      # cast to bfloat16, slice to a sampled width or BN scale product.
      with tf.control_dependencies([tap]):
        outputs.append(fn(tap, coef))
      continue
    shape = []

    def taken(tap=tap, coef=coef, fn=fn, shape=shape):
      y = fn(tap, coef)
      shape.append(y.shape)
      return y
    y = tf.cond(a, taken, lambda tap=tap: _dead_zeros(tap, zeros_fn))
    # The zeros may have a dynamic shape (a sampled width); the output has
    # the taken branch's.
    y.set_shape(shape[0])
    outputs.append(y)

  def accumulate():
    # Sums the live outputs in branch order: total is dead until a branch
    # was active (or is the base).
    total, seen = base, None
    for i, (y, a) in enumerate(zip(outputs, active)):
      if total is None:
        total, seen = y, a
        continue
      keep, add_to = tf.raw_ops.Switch(data=total, pred=a)
      if seen is None:  # A base: every active output is added to it.
        total = tf.raw_ops.Merge(inputs=[add_to + y, keep]).output
        continue
      first, later = tf.raw_ops.Switch(data=y, pred=seen)
      total = tf.raw_ops.Merge(inputs=[add_to + later, first, keep]).output
      seen = tf.logical_or(seen, a)
    if base is None:
      # Merge's first input must be built here (its gradient reads the
      # first input's context).
      total = tf.raw_ops.Merge(inputs=[_dead_zeros(none, zeros_fn),
                                       total]).output
    total.set_shape(outputs[0].shape)
    return total
  return context_free(accumulate)


def switch(x: tf.Tensor, branches: List[Branch], base: Optional[tf.Tensor],
           zeros_fn: Callable[[tf.Tensor], tf.Tensor],
           conds: bool = True) -> tf.Tensor:
  """`base + sum_i fn_i(x, coef_i)` over the branches with `coef_i > 0`.

  Only branches with a positive mask entry run (docs/method.md section 4),
  so the cost does not grow with the number of choices.

  Args:
    x: the input of every branch.
    branches: `(coef, fn)` with coef a float32 scalar and `fn(x, coef)`
      returning the branch output already multiplied by coef.
    base: optional tensor to add the outputs to (e.g. a residual input).
    zeros_fn: `zeros_fn(x)` makes the output when no branch is active and
      there is no base.
    conds: each branch in a v1 `tf.cond`, whose gradient for a weight it
      reads is zero when the branch is inactive. False (v1 control flow
      only): dead, not zero, which only a weight used by one branch and
      nowhere else may get (`dead_gradients`), or a build no gradient is
      taken through.

  Returns:
    The sum, shaped like a branch output.
  """
  if tf.compat.v1.control_flow_v2_enabled():
    # Functional conds (XLA) cannot be routed by context-free Switch/Merge.
    return _nested_switch(x, branches, base, zeros_fn)
  return _routed_switch(x, branches, base, zeros_fn, conds)


@contextlib.contextmanager
def v1_control_flow():
  """Builds `tf.cond` as graph-level Switch/Merge while active.

  Version-2 conds trace every branch into a function graph, and their
  gradients trace more: for a supernet with ~150 nested op switches that
  costs minutes of graph building and start-up, against seconds for v1 conds.
  Uses the public toggles and restores the previous setting.
  """
  was_v2 = tf.compat.v1.control_flow_v2_enabled()
  if was_v2:
    tf.compat.v1.disable_control_flow_v2()
  try:
    yield
  finally:
    if was_v2:
      tf.compat.v1.enable_control_flow_v2()


@contextlib.contextmanager
def v2_control_flow():
  """Builds `tf.cond` as functional `If` ops while active.

  XLA maps an `If` straight to a conditional computation; Switch/Merge it
  must first functionalise, which made compiling a supernet about 2.5x slower
  (docs/xla.md). Uses the public toggles and restores the previous setting.
  """
  was_v2 = tf.compat.v1.control_flow_v2_enabled()
  if not was_v2:
    tf.compat.v1.enable_control_flow_v2()
  try:
    yield
  finally:
    if not was_v2:
      tf.compat.v1.disable_control_flow_v2()


def drop_path(x: tf.Tensor, rate: float) -> tf.Tensor:
  """Drops each example's residual branch with probability `rate`.

  Stochastic depth (Huang et al. 2016), scaled by 1 / (1 - rate) when kept.
  """
  keep = 1.0 - rate
  noise = tf.random.uniform([tf.shape(x)[0], 1, 1, 1], dtype=tf.float32)
  keep_mask = tf.floor(keep + noise) / keep
  return x * tf.cast(keep_mask, x.dtype)
