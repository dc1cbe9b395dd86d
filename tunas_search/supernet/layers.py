"""The parts every layer of the builder is made of.

A layer's variables, created at their largest widths, read at the searched
width (`widths.narrow`) and registered for weight decay, and `choose`, which
turns a field that may be a decision (a kernel size, squeeze-excite) into one
apply function. `builder` and `uib` build their layers from these.
"""

import dataclasses
from typing import Any, Callable, Optional

import tensorflow as tf

from tunas_search.space.schema import OneOf
from tunas_search.supernet import ops
from tunas_search.supernet import widths
from tunas_search.supernet.ops import BuildContext
from tunas_search.supernet.widths import Width

# `apply(x, scale, base)` returns `base + scale * layer(x)`; scale (a float32
# scalar mask entry) and base are optional.
Apply = Callable[..., tf.Tensor]


@dataclasses.dataclass(frozen=True)
class Built:
  """A built layer: `apply` (None for Zero), output width and stride."""
  apply: Optional[Apply]
  width: Width
  strides: int = 1


def in_choice(ctx: BuildContext, entry: tf.Tensor) -> BuildContext:
  """The context of a searched choice whose mask entry is `entry`."""
  return dataclasses.replace(ctx, in_cond=True,
                             op_scale=ops.combine(ctx.op_scale, entry))


def conv_kernel(scope: str, kernel_size: int, in_width: Width,
                out_width: Width, ctx: BuildContext) -> tf.Tensor:
  """A conv kernel (variable at the largest widths), registered for decay."""
  ctx.record(scope, 'kernel')
  kernel = widths.narrow(
      ops.conv_kernel(scope, kernel_size, in_width.max, out_width.max),
      (None, None, in_width, out_width))
  if ctx.decay is not None:
    ctx.decay.add(f'{scope}/kernel', kernel, ctx.op_scale, in_width.mask,
                  out_width.mask)
  return kernel


def depthwise_kernel(scope: str, kernel_size: int, channels: Width,
                     ctx: BuildContext) -> tf.Tensor:
  """A depthwise kernel, registered for weight decay (channel axis 2)."""
  ctx.record(scope, 'kernel')
  kernel = widths.narrow(ops.depthwise_kernel(scope, kernel_size, channels.max),
                         (None, None, channels, None))
  if ctx.decay is not None:
    ctx.decay.add(f'{scope}/kernel', kernel, ctx.op_scale, channels.mask)
  return kernel


def batch_norm_vars(scope: str, width: Width,
                    ctx: BuildContext) -> ops.BatchNormVars:
  """A BN's variables, read at `width` (see `widths.narrow`)."""
  ctx.record(scope, 'gamma', 'beta')
  bn = ops.batch_norm_vars(scope, width.max, ctx)
  if width.size is None:
    return bn
  if bn.moving_mean is not None:
    raise ValueError(
        f'{scope}: stateful batch norm cannot run at a sampled width; use '
        f'batch_norm_mode="batch" for supernets (docs/method.md section 4)')
  return ops.BatchNormVars(widths.narrow(bn.gamma, (width,)),
                           widths.narrow(bn.beta, (width,)))


def bias(scope: str, width: Width, ctx: BuildContext) -> tf.Tensor:
  """A zero-initialised bias, read at `width`."""
  ctx.record(scope, 'bias')
  return widths.narrow(ops.bias(scope, width.max), (width,))


def choose(value: Any, path: str, make: Callable, ctx: BuildContext,
           zeros_fn: Callable[[tf.Tensor], tf.Tensor]) -> Callable:
  """An apply function `x -> y` for a field that may be a decision.

  Args:
    value: a plain choice or a OneOf of them (kernel size, squeeze-excite).
    path: spec path of `value`.
    make: `make(choice, ctx)` creates the choice's variables and returns
      `fn(x, coef)` computing the choice's output times coef (coef may be None).
    ctx: build settings.
    zeros_fn: output when no choice is active, given x.

  Returns:
    `fn(x)`: the selected choice, or the mask-weighted sum of searched ones.
  """
  if isinstance(value, OneOf):
    index = widths.selected_index(value, path)
    if index is None:
      entries = widths.mask_entries(value)
      fns = [make(c, in_choice(ctx, e))
             for c, e in zip(value.choices, entries)]
      branches = list(zip(entries, fns))
      return lambda x: ops.switch(x, branches, None, zeros_fn,
                                  not ctx.dead_branches)
    value = value.choices[index]
  fn = make(value, ctx)
  return lambda x: fn(x, None)


def depthwise_choice(path: str, channels: Width, strides: int,
                     act: str) -> Callable:
  """`make` for a kernel-size choice: depthwise k x k -> BN -> activation.

  Each kernel size has its own kernel and BN (docs/method.md section 4):
  `path/depthwise_k{k}/kernel` and `path/depthwise_bn_k{k}/*`.
  """
  def make(k: int, ctx: BuildContext):
    kernel = depthwise_kernel(f'{path}/depthwise_k{k}', k, channels, ctx)
    bn = batch_norm_vars(f'{path}/depthwise_bn_k{k}', channels, ctx)
    def fn(x, coef):
      y = ops.depthwise_conv2d(x, kernel, strides)
      return ops.bn_activation(y, bn, ctx, act, channels.mask, coef)
    return fn
  return make
