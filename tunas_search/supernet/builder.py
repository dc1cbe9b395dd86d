"""The spec -> network builder, one code path for supernets and stand-alone nets.

`build_network` walks a masked model spec (docs/DESIGN.md, "Masks"). For each
layer it first creates the variables, named after the layer's spec path, then
returns an apply function; searched op choices run their apply functions
only when selected (`ops.switch`: inside `tf.cond`, or on an input that is
dead when not selected), so only the selected path is computed
(docs/method.md section 4).
Searched widths are masked at the largest width or computed at the sampled
width (`widths.WIDTH_FORMS`); every variable is read through `widths.narrow`,
which slices it to the sampled width in the sampled form.
"""

import contextlib
from typing import Any, Callable, Optional, Set

import tensorflow as tf

from tunas_search.space import specs
from tunas_search.space.schema import OneOf
from tunas_search.supernet import forms
from tunas_search.supernet import layers
from tunas_search.supernet import ops
from tunas_search.supernet import uib
from tunas_search.supernet import widths
from tunas_search.supernet.layers import Built
from tunas_search.supernet.ops import BuildContext
from tunas_search.supernet.widths import Width
from tunas_search.supernet.weights import MaskedWeightDecay
from tunas_search.supernet.weights import WeightUses
# Re-exported: docs/DESIGN.md lists these with the builder.
from tunas_search.supernet.weights import regularization_loss  # pylint: disable=unused-import
from tunas_search.supernet.weights import slice_to_shape  # pylint: disable=unused-import

# docs/method.md section 2: squeeze-excite squeezes to a quarter of the expanded width.
SE_RATIO = 0.25
# docs/method.md section 2: the classifier's kernel is initialised N(0, 0.01).
CLASSIFIER_STDDEV = 0.01


def _finish(y: tf.Tensor, scale: Optional[tf.Tensor],
            base: Optional[tf.Tensor]) -> tf.Tensor:
  """`base + scale * y` for layers that cannot fold the scale in."""
  y = ops.scaled(y, scale)
  return y if base is None else base + y


def _build_conv(layer: specs.Conv, path: str, in_width: Width,
                out_width: Width, ctx: BuildContext) -> Built:
  """k x k conv -> BN, or conv + bias; one kernel (and BN) per kernel size."""
  def make(k: int, sub_ctx: BuildContext):
    kernel = layers.conv_kernel(f'{path}/conv_k{k}', k, in_width, out_width,
                                sub_ctx)
    if layer.use_batch_norm:
      bn = layers.batch_norm_vars(f'{path}/bn_k{k}', out_width, sub_ctx)
      return lambda x, coef: ops.batch_norm(
          ops.conv2d(x, kernel, layer.strides), bn, sub_ctx,
          ops.combine(out_width.mask, coef))
    b = layers.bias(f'{path}/conv_k{k}', out_width, sub_ctx)
    return lambda x, coef: ops.scaled(
        ops.conv2d(x, kernel, layer.strides) + tf.cast(b, x.dtype),
        ops.combine(out_width.mask, coef))

  conv = layers.choose(layer.kernel_size, f'{path}/kernel_size', make, ctx,
                       lambda x: ops.zeros_like_output(x, layer.strides,
                                                       out_width.channels))
  return Built(lambda x, scale=None, base=None: _finish(conv(x), scale, base),
               out_width, layer.strides)


def _build_separable(layer: specs.SeparableConv, path: str, in_width: Width,
                     out_width: Width, ctx: BuildContext) -> Built:
  """Depthwise -> BN -> act -> 1x1 `project` -> `project_bn` (docs/method.md section 2)."""
  depthwise = layers.choose(
      layer.kernel_size, f'{path}/kernel_size',
      layers.depthwise_choice(path, in_width, layer.strides,
                              layer.activation), ctx,
      lambda x: ops.zeros_like_output(x, layer.strides, in_width.channels))
  project = layers.conv_kernel(f'{path}/project', 1, in_width, out_width, ctx)
  project_bn = layers.batch_norm_vars(f'{path}/project_bn', out_width, ctx)

  def apply(x, scale=None, base=None):
    y = ops.conv2d(depthwise(x), project)
    y = ops.batch_norm(y, project_bn, ctx, ops.combine(out_width.mask, scale))
    return y if base is None else base + y
  return Built(apply, out_width, layer.strides)


def _squeeze_excite_choice(path: str, expanded: Width,
                           layer: specs.DepthwiseBottleneck) -> Callable:
  """`make` for the squeeze-excite on/off choice (docs/method.md section 2)."""
  hidden = widths.map_widths(
      expanded, lambda w: specs.make_divisible(SE_RATIO * w))

  def make(enabled: bool, ctx: BuildContext):
    if not enabled:
      return ops.scaled
    reduce_k = layers.conv_kernel(f'{path}/se/reduce', 1, expanded, hidden, ctx)
    reduce_b = layers.bias(f'{path}/se/reduce', hidden, ctx)
    expand_k = layers.conv_kernel(f'{path}/se/expand', 1, hidden, expanded, ctx)
    expand_b = layers.bias(f'{path}/se/expand', expanded, ctx)

    def fn(x, coef):
      pooled = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
      h = ops.conv2d(pooled, reduce_k) + tf.cast(reduce_b, x.dtype)
      # Hidden channels outside the expanded width's SE width must stay 0.
      h = ops.scaled(ops.activation(h, layer.se_inner_activation),
                     hidden.mask)
      gate = ops.conv2d(h, expand_k) + tf.cast(expand_b, x.dtype)
      gate = ops.activation(gate, layer.se_gating_activation)
      return x * ops.scaled(gate, coef)
    return fn
  return make


def _build_bottleneck(layer: specs.DepthwiseBottleneck, path: str,
                      in_width: Width, out_width: Width,
                      ctx: BuildContext) -> Built:
  """Inverted bottleneck; expand/project and their BNs shared by kernels."""
  expanded = widths.expanded_width(in_width, layer.expansion_filters,
                                   ctx.filters_base,
                                   f'{path}/expansion_filters',
                                   ctx.sampled_widths)
  expand = layers.conv_kernel(f'{path}/expand', 1, in_width, expanded, ctx)
  expand_bn = layers.batch_norm_vars(f'{path}/expand_bn', expanded, ctx)
  depthwise = layers.choose(
      layer.kernel_size, f'{path}/kernel_size',
      layers.depthwise_choice(path, expanded, layer.strides,
                              layer.activation), ctx,
      lambda x: ops.zeros_like_output(x, layer.strides, expanded.channels))
  squeeze_excite = layers.choose(
      layer.use_squeeze_and_excite, f'{path}/use_squeeze_and_excite',
      _squeeze_excite_choice(path, expanded, layer), ctx, tf.zeros_like)
  project = layers.conv_kernel(f'{path}/project', 1, expanded, out_width, ctx)
  project_bn = layers.batch_norm_vars(f'{path}/project_bn', out_width, ctx)

  def apply(x, scale=None, base=None):
    h = ops.bn_activation(ops.conv2d(x, expand), expand_bn, ctx,
                          layer.activation, expanded.mask, None)
    h = squeeze_excite(depthwise(h))
    # The op's mask entry is folded into the last BN (no activation after).
    y = ops.batch_norm(ops.conv2d(h, project), project_bn, ctx,
                       ops.combine(out_width.mask, scale))
    return y if base is None else base + y
  return Built(apply, out_width, layer.strides)


def _build_activation(layer: specs.Activation, path: str, in_width: Width,
                      out_width: Width, ctx: BuildContext) -> Built:
  del path, out_width, ctx
  # sigmoid(0) != 0: masked-off channels must be zeroed again.
  mask = in_width.mask if layer.name == 'sigmoid' else None
  return Built(lambda x, scale=None, base=None: _finish(
      ops.scaled(ops.activation(x, layer.name), mask), scale, base), in_width)


def _build_pool(layer, path, in_width, out_width, ctx) -> Built:
  del layer, path, out_width, ctx
  return Built(lambda x, scale=None, base=None: _finish(
      tf.reduce_mean(x, axis=[1, 2], keepdims=True), scale, base), in_width)


def _build_identity(layer, path, in_width, out_width, ctx) -> Built:
  del layer, path, out_width, ctx
  return Built(lambda x, scale=None, base=None: _finish(x, scale, base),
               in_width)


def _build_zero(layer, path, in_width, out_width, ctx) -> Built:
  del layer, path, out_width, ctx
  return Built(None, in_width)


def _build_residual(layer: specs.Residual, path: str, in_width: Width,
                    out_width: Width, ctx: BuildContext) -> Built:
  """`layer(x) + x`; the identity when the layer is (or selects) Zero."""
  inner = build_layer(layer.layer, f'{path}/layer', in_width, out_width, ctx)
  if inner.apply is None:
    return _build_identity(layer, path, in_width, out_width, ctx)
  if inner.strides != 1 or inner.width.max != in_width.max:
    raise ValueError(f'{path}: a residual layer must keep its input shape')
  drop = ctx.is_training and ctx.path_dropout_rate > 0

  def apply(x, scale=None, base=None):
    if drop:
      y = x + ops.drop_path(inner.apply(x), ctx.path_dropout_rate)
    else:  # Adding onto x inside the op switch saves a zero tensor.
      y = inner.apply(x, None, x)
    return _finish(y, scale, base)
  return Built(apply, in_width)


def _build_oneof(oneof: OneOf, path: str, in_width: Width, out_width: Width,
                 ctx: BuildContext) -> Built:
  """An op decision: the selected layer, or a conditional switch."""
  index = widths.selected_index(oneof, path)
  if index is not None:
    return build_layer(oneof.choices[index], f'{path}/choices/{index}',
                       in_width, out_width, ctx)
  entries = widths.mask_entries(oneof)
  built = [build_layer(c, f'{path}/choices/{i}', in_width, out_width,
                       layers.in_choice(ctx, e))
           for i, (c, e) in enumerate(zip(oneof.choices, entries))]
  real = [(m, b) for m, b in zip(entries, built) if b.apply is not None]
  if not real:
    return Built(None, in_width)
  first = real[0][1]
  if any(b.strides != first.strides or b.width.max != first.width.max
         for _, b in real):
    raise ValueError(f'{path}: op choices must have the same output shape')
  branches = [(m, lambda x, c, f=b.apply: f(x, c)) for m, b in real]

  def apply(x, scale=None, base=None):
    if scale is not None:
      branches_s = [(m, lambda x, c, f=f: f(x, c * scale)) for m, f in branches]
    else:
      branches_s = branches
    return ops.switch(x, branches_s, base, lambda x: ops.zeros_like_output(
        x, first.strides, first.width.channels), not ctx.dead_branches)
  return Built(apply, first.width, first.strides)


_BUILDERS = {
    OneOf: _build_oneof,
    specs.Conv: _build_conv,
    specs.SeparableConv: _build_separable,
    specs.DepthwiseBottleneck: _build_bottleneck,
    specs.UniversalInvertedBottleneck: uib.build_uib,
    specs.Activation: _build_activation,
    specs.Residual: _build_residual,
    specs.Zero: _build_zero,
    specs.GlobalAveragePool: _build_pool,
    specs.DetectionEndpoint: _build_identity,
}


def build_layer(layer: Any, path: str, in_width: Width, out_width: Width,
                ctx: BuildContext) -> Built:
  """Creates a layer's variables and returns how to apply it.

  Args:
    layer: a layer record or an op OneOf of them.
    path: the layer's spec path (variable scope).
    in_width: width of the layer's input.
    out_width: the enclosing block's width (output of width-changing layers).
    ctx: build settings.

  Returns:
    The built layer.

  Raises:
    ValueError: on an unsupported layer type or an inconsistent spec.
  """
  builder = _BUILDERS.get(type(layer))
  if builder is None:
    raise ValueError(f'{path}: cannot build {type(layer).__name__}; '
                     f'supported: {[t.__name__ for t in _BUILDERS]}')
  return builder(layer, path, in_width, out_width, ctx)


def _classifier(features: tf.Tensor, width: Width, num_classes: int,
                ctx: BuildContext, dropout_rate: float) -> tf.Tensor:
  """Global average pool -> dropout -> dense with bias (docs/method.md section 2).

  Runs in float32 whatever the compute dtype, for accurate logits.
  """
  pooled = tf.cast(tf.reduce_mean(features, axis=[1, 2]), tf.float32)
  if ctx.is_training and dropout_rate > 0:
    pooled = tf.nn.dropout(pooled, rate=dropout_rate)
  ctx.record('classifier', 'kernel', 'bias')
  kernel = widths.narrow(ops.get_var(
      'classifier', 'kernel', [width.max, num_classes],
      tf.compat.v1.random_normal_initializer(stddev=CLASSIFIER_STDDEV)),
                         (width, None))
  b = ops.bias('classifier', num_classes)
  return tf.matmul(pooled, kernel) + b


def build_network(model_spec: specs.ConvTower, images: tf.Tensor,
                  num_classes: int, form: forms.Form, *,
                  dtype: tf.DType = tf.float32,
                  decay: Optional[MaskedWeightDecay] = None,
                  uses: Optional[WeightUses] = None) -> tf.Tensor:
  """Builds the network of a masked spec on `images`, in a named form.

  Numpy one-hot masks give a stand-alone network (only the selected ops, exact
  widths); tensor masks give a supernet (largest widths, masked or sliced to
  the sampled width; op choices run conditionally), built as `form` says
  (`forms`: standalone, xla, every_step, deferred, validation). Variables
  are named after spec paths inside the caller's variable scope and reused
  by later calls (AUTO_REUSE).

  Args:
    model_spec: a `ConvTower` with a mask on every OneOf.
    images: float32 [N, H, W, C] with static H, W and C.
    num_classes: classifier outputs.
    form: how to build (`forms`).
    dtype: compute dtype, tf.float32 or tf.bfloat16; variables stay float32.
    decay: if given, collects the weight-decay term of every kernel this
      build uses, masked by the sampled path (`MaskedWeightDecay`); pass it
      to the training build only.
    uses: records the op scales of every variable this build creates or
      reuses (`WeightUses`, for `deferred.DeferredRMSProp`); the deferred
      form needs it, and checks that every weight of an op choice is used
      by that choice alone (its gradient is dead where the choice did not
      run).

  Returns:
    float32 logits [N, num_classes].

  Raises:
    ValueError: on bad arguments, a missing or malformed mask, or a spec the
      builder cannot build.
  """
  if not isinstance(form, forms.Form):
    raise ValueError(f'form must be a supernet.forms.Form, got {form!r}')
  if dtype not in (tf.float32, tf.bfloat16):
    raise ValueError(f'dtype must be float32 or bfloat16, got {dtype}')
  if form.records_uses and uses is None:
    raise ValueError(f'the {form.name} form records the weights it uses: '
                     'pass uses=WeightUses()')
  ctx = BuildContext(form.is_training, form.batch_norm_mode, dtype,
                     form.path_dropout_rate, model_spec.filters_base,
                     decay=decay, uses=uses,
                     sampled_widths=form.sampled_widths,
                     # Conds cost ~25 graph nodes per choice (`ops.switch`);
                     # without, an unselected choice's gradients are dead.
                     dead_branches=form.choices == forms.DEAD)
  x = tf.cast(images, dtype)
  width = widths.fixed(images.shape[-1])
  read: Set[str] = set()
  with contextlib.ExitStack() as stack:
    stack.enter_context(ops.v2_control_flow()
                        if form.choices == forms.FUNCTIONAL
                        else ops.v1_control_flow())
    if ctx.dead_branches and uses is not None:
      stack.enter_context(_reading_names(read))
    for b, block in enumerate(model_spec.blocks):
      block_width = widths.block_width(block.filters, f'blocks/{b}/filters',
                                       ctx.sampled_widths)
      for i, layer in enumerate(block.layers):
        built = build_layer(layer, f'blocks/{b}/layers/{i}', width,
                            block_width, ctx)
        x = tf.zeros_like(x) if built.apply is None else built.apply(x)
        width = built.width
    logits = _classifier(x, width, num_classes, ctx, form.dropout_rate)
  if read:
    _check_dead_gradients(uses, read)
  return logits


@contextlib.contextmanager
def _reading_names(names: Set[str]):
  """While active, adds the name of every trainable variable got to `names`."""
  def recording_getter(getter, *args, **kwargs):
    if kwargs.get('trainable', True):
      names.add(kwargs['name'])
    return getter(*args, **kwargs)

  with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                   custom_getter=recording_getter):
    yield


def _check_dead_gradients(uses: WeightUses, read: Set[str]) -> None:
  """Refuses a build whose dead gradients would lose a live one.

  A weight read by an unselected choice of a build without conds gets a
  dead gradient, which only the deferred update's weights with one use
  inside a choice may have (`WeightUses.used_once`): TensorFlow sums a
  weight's gradients with an AddN, dead if any part is, so a weight with a
  second use could lose a live part, and the update reads the gradients of
  other weights every step. A weight `uses` does not know of would be
  updated as if always used. Neither can happen with the builder's layers,
  which name each weight after the one spec path that uses it; this guards
  new layer builders.
  """
  shared = uses.reused_inside_choices()
  # Recorded names are spec paths: a build inside a variable scope would
  # list every weight here (the deferred update matches weights by name).
  unknown = sorted(read - set(uses.names))
  if shared or unknown:
    raise ValueError(
        'a supernet built for dead gradients of unused weights (deferred '
        'update) must use each weight of an op choice once, in that choice '
        f'alone, and record every weight by its name; used more than once: '
        f'{shared[:5]} ({len(shared)} in all), not recorded: {unknown[:5]} '
        f'({len(unknown)} in all)')
