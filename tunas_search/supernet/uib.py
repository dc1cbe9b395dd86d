"""The builder of MobileNetV4's Universal Inverted Bottleneck (UIB).

docs/mobilenet_v4.md: [start depthwise -> BN] -> 1x1 expand -> BN -> act ->
[middle depthwise -> BN -> act] -> 1x1 project -> BN, no biases (Qin et al.
2024, section 4); the middle depthwise conv carries the stride, or the start
one in a block without a middle one (`stride_on_start`). Each depthwise position is a searched kernel
size whose choice 0 (`specs.NO_DEPTHWISE`) is the identity; the 1x1 convs
and their BNs sit outside both switches, so the nine instantiations of a
block share them and a step runs only the sampled depthwise convs: it costs
what the sampled block costs.
"""

from typing import Callable

from tunas_search.space import specs
from tunas_search.supernet import layers
from tunas_search.supernet import ops
from tunas_search.supernet import widths
from tunas_search.supernet.ops import BuildContext
from tunas_search.supernet.widths import Width


def _identity(x, coef):
  return ops.scaled(x, coef)


def _start_choice(path: str, channels: Width, strides: int) -> Callable:
  """`make` for the start kernel: depthwise k x k -> BN, no activation;
  `path/start_depthwise_k{k}/kernel`, `.../start_depthwise_bn_k{k}`.
  """
  def make(k: int, ctx: BuildContext):
    if k == specs.NO_DEPTHWISE:
      return _identity
    kernel = layers.depthwise_kernel(f'{path}/start_depthwise_k{k}', k,
                                     channels, ctx)
    bn = layers.batch_norm_vars(f'{path}/start_depthwise_bn_k{k}',
                                channels, ctx)
    def fn(x, coef):
      return ops.batch_norm(ops.depthwise_conv2d(x, kernel, strides), bn, ctx,
                            ops.combine(channels.mask, coef))
    return fn
  return make


def _middle_choice(path: str, channels: Width, strides: int,
                   act: str) -> Callable:
  """`make` for the middle kernel: the inverted bottleneck's depthwise conv
  (`path/depthwise_k{k}`, as `DepthwiseBottleneck`'s), or the identity."""
  depthwise = layers.depthwise_choice(path, channels, strides, act)

  def make(k: int, ctx: BuildContext):
    # A strided block without one strides its start depthwise conv.
    return _identity if k == specs.NO_DEPTHWISE else depthwise(k, ctx)
  return make


def build_uib(layer: specs.UniversalInvertedBottleneck, path: str,
              in_width: Width, out_width: Width,
              ctx: BuildContext) -> layers.Built:
  """A UIB; its 1x1 convs and their BNs shared by every kernel choice."""
  expanded = widths.expanded_width(in_width, layer.expansion_filters,
                                   ctx.filters_base,
                                   f'{path}/expansion_filters',
                                   ctx.sampled_widths)
  # Never both > 1 (specs.UniversalInvertedBottleneck).
  start_strides = layer.strides if layer.stride_on_start else 1
  middle_strides = 1 if layer.stride_on_start else layer.strides
  start = layers.choose(
      layer.start_kernel_size, f'{path}/start_kernel_size',
      _start_choice(path, in_width, start_strides), ctx,
      lambda x: ops.zeros_like_output(x, start_strides, in_width.channels))
  expand = layers.conv_kernel(f'{path}/expand', 1, in_width, expanded, ctx)
  expand_bn = layers.batch_norm_vars(f'{path}/expand_bn', expanded, ctx)
  middle = layers.choose(
      layer.middle_kernel_size, f'{path}/middle_kernel_size',
      _middle_choice(path, expanded, middle_strides, layer.activation), ctx,
      lambda x: ops.zeros_like_output(x, middle_strides, expanded.channels))
  project = layers.conv_kernel(f'{path}/project', 1, expanded, out_width,
                               ctx)
  project_bn = layers.batch_norm_vars(f'{path}/project_bn', out_width, ctx)

  def apply(x, scale=None, base=None):
    h = ops.bn_activation(ops.conv2d(start(x), expand), expand_bn, ctx,
                          layer.activation, expanded.mask, None)
    # The op's mask entry is folded into the last BN (no activation after).
    y = ops.batch_norm(ops.conv2d(middle(h), project), project_bn, ctx,
                       ops.combine(out_width.mask, scale))
    return y if base is None else base + y
  return layers.Built(apply, out_width, layer.strides)
