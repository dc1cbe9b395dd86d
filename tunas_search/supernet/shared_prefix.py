"""Several architectures' forward passes on one batch, each prefix computed once.

A retarget scores one architecture per controller on the same validation
batch (docs/retarget.md, "Cost"). Where two controllers sampled the same
choices for every decision up to and including a layer, both networks hold
the same activations there (same weights, same batch, batch-statistics BN),
so `build_networks` computes them once: architecture k takes the activations
of the first earlier architecture whose decisions agree with its own on the
whole prefix, and its own layer is dead (never run) that step. The routing
is TensorFlow's Switch/Merge, decided per step in the graph, as the op
choices' (`ops.switch`, docs/DESIGN.md "Control flow"); the shared value is
the one the unshared computation would give, bit for bit.

No gradient is taken through these passes (the validation form only).
"""

from typing import Any, List, NamedTuple, Optional, Sequence

import tensorflow as tf

from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.supernet import builder
from tunas_search.supernet import forms
from tunas_search.supernet import widths


class Networks(NamedTuple):
  """What `build_networks` built.

  Attributes:
    logits: per architecture, float32 [N, num_classes].
    shared_layers: per architecture, int32 scalar: how many of its layers
      (the classifier counts as one) it took from an earlier architecture
      this step instead of computing; always 0 for the first.
    num_layers: the layers of one network, the classifier included.
  """
  logits: List[tf.Tensor]
  shared_layers: List[tf.Tensor]
  num_layers: int


def _masks(node: Any) -> List[Any]:
  """The masks of every decision in `node`, in traversal order."""
  found = []

  def collect(_, oneof):
    found.append(oneof.mask)
    return oneof
  schema.map_oneofs(collect, node)
  return found


def _layer_masks(model_spec: specs.ConvTower) -> List[List[Any]]:
  """Per layer (input to output), the masks of the decisions it adds to
  the prefix: its own, and its block's width at the block's first layer."""
  result = []
  for block in model_spec.blocks:
    for i, layer in enumerate(block.layers):
      result.append((_masks(block.filters) if i == 0 else []) + _masks(layer))
  return result


def num_layers(model_spec: specs.ConvTower) -> int:
  """The layers of `model_spec`'s network, the classifier counted as one."""
  return len(_layer_masks(model_spec)) + 1


def undecided_prefix(model_spec: specs.ConvTower) -> int:
  """How many layers come before the first decision's: every architecture
  of the space computes them alike, so `build_networks` always shares
  them."""
  count = 0
  for masks in _layer_masks(model_spec):
    if masks:
      break
    count += 1
  return count


def _same(masks_a: Sequence[Any], masks_b: Sequence[Any]) -> tf.Tensor:
  """bool scalar: whether two lists of masks are equal entry by entry."""
  if not masks_a:
    return tf.constant(True)
  return tf.reduce_all(tf.stack([
      tf.reduce_all(tf.equal(tf.cast(a, tf.float32), tf.cast(b, tf.float32)))
      for a, b in zip(masks_a, masks_b)]))


def _reuse_or_compute(own_input: tf.Tensor, compute, earlier: List[tf.Tensor],
                      agree: List[tf.Tensor]) -> tf.Tensor:
  """`earlier[j]` for the first j with `agree[j]`, else `compute(own_input)`.

  The computation runs on a routed input and after it, so every op of it is
  dead (skipped) when an earlier output is taken.
  """
  if not earlier:
    return compute(own_input)
  taken, reuse_any = [], tf.constant(False)
  for x_j, a_j in zip(earlier, agree):
    first = tf.logical_and(a_j, tf.logical_not(reuse_any))
    taken.append(tf.raw_ops.Switch(data=x_j, pred=first)[1])
    reuse_any = tf.logical_or(reuse_any, a_j)
  routed = tf.raw_ops.Switch(data=own_input, pred=reuse_any)[0]
  with tf.control_dependencies([routed]):
    own = compute(routed)
  out = tf.raw_ops.Merge(inputs=[own] + taken).output
  out.set_shape(own.shape)
  return out


def build_networks(model_specs: Sequence[specs.ConvTower], images: tf.Tensor,
                   num_classes: int, form: forms.Form, *,
                   dtype: tf.DType = tf.float32) -> Networks:
  """`build_network` of each masked spec on `images`, prefixes shared.

  Args:
    model_specs: masked specs of one space (the same spec, other masks).
    images: float32 [N, H, W, C] with static H, W and C.
    num_classes: classifier outputs.
    form: a supernet form without conds or gradients (`forms.validation`).
    dtype: compute dtype, tf.float32 or tf.bfloat16.

  Returns:
    The `Networks`: logits equal to `build_network`'s for each spec.

  Raises:
    ValueError: for no spec, a form with conds or that records weight uses
      (a training pass), or what `build_network` raises.
  """
  if not model_specs:
    raise ValueError('build_networks needs at least one model spec')
  if form.choices != forms.DEAD or form.records_uses:
    raise ValueError(f'build_networks shares forward passes only; the '
                     f'{form.name!r} form is a training pass or has conds; '
                     f'use the validation form')
  ctx = builder.build_context(model_specs[0], form, dtype)
  layer_masks = [_layer_masks(spec) for spec in model_specs]
  count = len(model_specs)
  # agree[k][j]: architectures k and j agree on every decision so far.
  agree = [[tf.constant(True)] * k for k in range(count)]
  shared = [tf.constant(0, tf.int32) for _ in range(count)]
  xs = [tf.cast(images, dtype)] * count
  walks = [builder.layer_walk(spec, ctx) for spec in model_specs]
  in_widths: List[Optional[widths.Width]] = (
      [widths.fixed(images.shape[-1])] * count)
  layers = num_layers(model_specs[0])
  with builder.control_flow(form):
    for layer_index in range(layers - 1):
      outs = []
      for k in range(count):
        path, layer, block_width = next(walks[k])
        # Built (variables read, widths computed) outside the routing: the
        # next layer's width must be live whichever way this one goes.
        built = builder.build_layer(layer, path, in_widths[k], block_width,
                                    ctx)
        in_widths[k] = built.width
        agree[k] = [tf.logical_and(a, _same(layer_masks[k][layer_index],
                                            layer_masks[j][layer_index]))
                    for j, a in enumerate(agree[k])]
        apply = (tf.zeros_like if built.apply is None else built.apply)
        outs.append(_reuse_or_compute(xs[k], apply, outs[:k], agree[k]))
        shared[k] = _count(shared[k], agree[k])
      xs = outs
    logits = []
    for k in range(count):
      def head(x, k=k):
        return builder.classifier(x, in_widths[k], num_classes, ctx,
                                  form.dropout_rate)
      logits.append(_reuse_or_compute(xs[k], head, logits[:k], agree[k]))
      shared[k] = _count(shared[k], agree[k])
  return Networks(logits, shared, layers)


def _count(total: tf.Tensor, agree: List[tf.Tensor]) -> tf.Tensor:
  if not agree:
    return total
  return total + tf.cast(tf.reduce_any(tf.stack(agree)), tf.int32)
