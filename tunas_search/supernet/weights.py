"""Weight decay and initialising a stand-alone network from supernet weights."""

from typing import (Any, Callable, Collection, Dict, List, Mapping, Optional,
                    Sequence, Tuple)

import numpy as np
import tensorflow as tf

from tunas_search.tf_internals import dead_gradients


def _base_name(name: str) -> str:
  """A variable or tensor name without its `:0` output suffix."""
  return name.split(':')[0]


def is_weight_decayed(name: str) -> bool:
  """Conv, depthwise and squeeze-excite kernels; not BN, biases, classifier.

  docs/method.md section 2. Relies on the builder's names: every such kernel is
  `.../kernel` and the classifier's is `.../classifier/kernel`.
  """
  parts = _base_name(name).split('/')
  return (parts[-1] == 'kernel' and len(parts) >= 2
          and parts[-2] != 'classifier')


def _is_moving_statistic(name: str) -> bool:
  return name.rsplit('/', 1)[-1] in ('moving_mean', 'moving_variance')


def regularization_loss(weight_decay: float,
                        variables: Optional[Sequence[tf.Variable]] = None
                        ) -> tf.Tensor:
  """`weight_decay / 2 * sum(w ** 2)` over the weight-decayed kernels.

  Args:
    weight_decay: the L2 coefficient (docs/method.md section 2: 4e-5, or 3e-5 when
      training in bfloat16).
    variables: candidates; defaults to the graph's trainable variables.

  Returns:
    float32 scalar (0 when no variable qualifies).
  """
  if variables is None:
    variables = tf.compat.v1.trainable_variables()
  kernels = [v for v in variables if is_weight_decayed(v.name)]
  if not kernels:
    return tf.constant(0.0)
  # l2_loss is sum(w ** 2) / 2 in one pass, and its gradient one multiply;
  # reduce_sum(square(w)) took two passes forward and three back.
  total = tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in kernels])
  return weight_decay * total


class MaskedWeightDecay:
  """The weight decay of the sampled path of a supernet (docs/method.md).

  TuNAS decays only what the sampled architecture uses (Bender et al. 2020;
  the released search code): each kernel's L2 term is multiplied by the op
  mask entries of the choices that enclose it (1/n each under op warm-up, 0
  when not selected), a width-masked kernel is decayed as `kernel * mask`
  (only its selected input and output channels), and a kernel used by several
  choices is decayed as much as the choice that uses it most: the maximum of
  its masked terms, not their sum.

  The builder calls `add` once per use of a weight-decayed kernel; a
  stand-alone network (no op scales, no channel masks) gets the plain
  `weight_decay / 2 * sum(w ** 2)` over its kernels. The terms are built by
  `loss`, which can make some of them dead in a step that does not use them.
  """

  def __init__(self):
    # name -> [(kernel, op_scale, in_mask, out_mask)], in insertion order.
    self._uses = {}

  def add(self, name: str, kernel, op_scale: Optional[tf.Tensor] = None,
          in_mask: Optional[tf.Tensor] = None,
          out_mask: Optional[tf.Tensor] = None) -> None:
    """Records one use of a [k, k, in, out] kernel.

    Args:
      name: the kernel variable's name (uses of one name share one term).
      kernel: the kernel variable (or a snapshot of its value).
      op_scale: float32 scalar product of the enclosing op mask entries.
      in_mask: float32 [in] channel mask of the kernel's input, or None.
      out_mask: float32 [out] channel mask of its output, or None.
    """
    self._uses.setdefault(name, []).append(
        (kernel, op_scale, in_mask, out_mask))

  @property
  def names(self) -> List[str]:
    """Names of the decayed kernels, in the order they were first added."""
    return list(self._uses)

  @staticmethod
  def _term(kernel, op_scale, in_mask, out_mask) -> tf.Tensor:
    """`op_scale * sum((kernel * masks) ** 2)`."""
    w = tf.cast(tf.convert_to_tensor(kernel), tf.float32)
    if in_mask is not None:
      w *= tf.reshape(tf.cast(in_mask, tf.float32), [1, 1, -1, 1])
    if out_mask is not None:
      w *= tf.reshape(tf.cast(out_mask, tf.float32), [1, 1, 1, -1])
    # sum(w ** 2) as 2 * l2_loss(w): one pass forward and one back, where
    # reduce_sum(square(w)) takes two and three.
    term = 2.0 * tf.nn.l2_loss(w)
    if op_scale is not None:
      term *= tf.cast(op_scale, tf.float32)
    return term

  def loss(self, weight_decay: float,
           dead_when_unused: Collection[str] = ()) -> tf.Tensor:
    """`weight_decay / 2 * sum over kernels of max(masked terms)`.

    Args:
      weight_decay: the L2 coefficient.
      dead_when_unused: names of kernels with one use, inside a choice
        (`WeightUses.used_once`), whose term and its gradient are to be
        dead in a step whose op scale is 0 (the term is 0 then), so that
        neither is computed (`dead_gradients`; the deferred form). Build
        the loss outside any control flow then.

    Returns:
      float32 scalar (0 when nothing was added).
    """
    if not self._uses:
      return tf.constant(0.0)
    dead = set(dead_when_unused)
    per_kernel = []
    # The dead-when-unused terms by op scale: (scale > 0, [terms]). One sum
    # per choice, made live by one `or_zero`, not one per kernel.
    by_scale: Dict[Any, Tuple[tf.Tensor, List[tf.Tensor]]] = {}
    for name, uses in self._uses.items():
      if (len(uses) == 1 and isinstance(uses[0][1], tf.Tensor)
          and name in dead):
        kernel, op_scale, in_mask, out_mask = uses[0]
        if op_scale.ref() not in by_scale:
          by_scale[op_scale.ref()] = (tf.cast(op_scale, tf.float32) > 0, [])
        used, terms = by_scale[op_scale.ref()]
        kernel = dead_gradients.route(tf.convert_to_tensor(kernel), used)
        terms.append(self._term(kernel, op_scale, in_mask, out_mask))
        continue
      terms = [self._term(*use) for use in uses]
      per_kernel.append(terms[0] if len(terms) == 1 else
                        tf.reduce_max(tf.stack(terms)))
    per_kernel += [dead_gradients.or_zero(tf.add_n(terms), used)
                   for used, terms in by_scale.values()]
    return 0.5 * weight_decay * tf.add_n(per_kernel)


class WeightUses:
  """Which searched choices use each shared weight: its op scales.

  The builder records every variable it creates with the product of the op
  mask entries enclosing it (`BuildContext.op_scale`; None outside any
  searched choice). A weight whose every recorded scale is 0 in a step is not
  used by that step's architecture: its gradient is exactly zero, which is
  what lets `deferred.DeferredRMSProp` postpone its RMSProp steps.
  """

  def __init__(self):
    self._scales = {}  # name -> [scale or None], in insertion order.

  def add(self, name: str, op_scale: Optional[tf.Tensor]) -> None:
    """Records one use of variable `name` (without `:0`) under `op_scale`."""
    self._scales.setdefault(_base_name(name), []).append(op_scale)

  def scales(self, name: str) -> Optional[List[tf.Tensor]]:
    """The op scales of `name`'s uses; None if it is used unconditionally.

    A weight the builder did not record counts as used unconditionally, so
    it is never deferred.
    """
    scales = self._scales.get(_base_name(name))
    if not scales or any(s is None for s in scales):
      return None
    return scales

  @property
  def names(self) -> List[str]:
    """The recorded names, in the order they were first added."""
    return list(self._scales)

  def reused_inside_choices(self) -> List[str]:
    """Names recorded inside a searched choice and more than once.

    Such a weight cannot be given a dead gradient (`used_once`).
    """
    return [name for name, scales in self._scales.items()
            if len(scales) > 1 and any(s is not None for s in scales)]

  def used_once(self) -> List[str]:
    """Names recorded exactly once, inside a searched choice.

    Such a weight's gradient can be dead, not zero, in a step that does not
    use it (`dead_gradients`): nothing sums it with a gradient of another
    use that did run.
    """
    return [name for name, scales in self._scales.items()
            if len(scales) == 1 and scales[0] is not None]


def slice_to_shape(value: np.ndarray, shape: Sequence[int]) -> np.ndarray:
  """The prefix `value[:shape[0], :shape[1], ...]` (docs/method.md section 4).

  Args:
    value: a supernet variable's value.
    shape: the stand-alone variable's shape, same rank, no larger anywhere.

  Returns:
    The slice.

  Raises:
    ValueError: on a rank mismatch or a target larger than the value.
  """
  value = np.asarray(value)
  shape = tuple(int(s) for s in shape)
  if value.ndim != len(shape) or any(s > v for s, v in zip(shape,
                                                           value.shape)):
    raise ValueError(f'cannot slice a value of shape {value.shape} to '
                     f'{shape}: need the same rank and no larger dimension')
  return value[tuple(slice(0, s) for s in shape)]


def supernet_assignments(
    supernet_values: Mapping[str, np.ndarray],
    variables: Optional[Sequence[tf.Variable]] = None,
    name_map: Optional[Callable[[str], str]] = None,
) -> List[Tuple[tf.Variable, np.ndarray]]:
  """Pairs each stand-alone variable with its sliced supernet value.

  BN moving statistics missing from a search-mode ('batch' BN) supernet are
  skipped: they keep their initial values (mean 0, variance 1).

  Args:
    supernet_values: supernet variable values by name (with or without
      `:0`), e.g. read from a checkpoint.
    variables: the stand-alone network's variables; defaults to the graph's
      global variables.
    name_map: maps a stand-alone variable name (without `:0`) to the
      supernet's name, e.g. to change a scope prefix; identity by default.

  Returns:
    `(variable, value)` pairs with values sliced to the variables' shapes.

  Raises:
    KeyError: naming a variable whose supernet value is missing.
    ValueError: if a supernet value is smaller than its variable.
  """
  values = {_base_name(k): v for k, v in supernet_values.items()}
  if variables is None:
    variables = tf.compat.v1.global_variables()
  pairs = []
  for var in variables:
    name = _base_name(var.name)
    source = name_map(name) if name_map else name
    if source not in values and _is_moving_statistic(name):
      continue
    if source not in values:
      close = sorted(values)[:5]
      raise KeyError(f'no supernet value for variable {name!r} (looked up '
                     f'{source!r}); {len(values)} values given, e.g. {close}')
    try:
      pairs.append((var, slice_to_shape(values[source],
                                         var.shape.as_list())))
    except ValueError as e:
      raise ValueError(f'{name}: {e}') from e
  return pairs


def supernet_init_op(supernet_values: Mapping[str, np.ndarray],
                     variables: Optional[Sequence[tf.Variable]] = None,
                     name_map: Optional[Callable[[str], str]] = None
                     ) -> tf.Operation:
  """One op assigning every variable its sliced supernet value.

  Args: as `supernet_assignments`.

  Returns:
    The grouped assign op (values are embedded as graph constants).
  """
  pairs = supernet_assignments(supernet_values, variables, name_map)
  return tf.group(*[var.assign(value.astype(var.dtype.base_dtype.as_numpy_dtype))
                    for var, value in pairs])
