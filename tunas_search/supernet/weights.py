"""Weight decay and initialising a stand-alone network from supernet weights."""

from typing import Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf


def _base_name(name: str) -> str:
  """A variable or tensor name without its `:0` output suffix."""
  return name.split(':')[0]


def is_weight_decayed(name: str) -> bool:
  """Conv, depthwise and squeeze-excite kernels; not BN, biases, classifier.

  SPEC.md section 2. Relies on the builder's names: every such kernel is
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
    weight_decay: the L2 coefficient (SPEC.md section 2: 4e-5, or 3e-5 when
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
  total = tf.add_n([tf.reduce_sum(tf.square(tf.cast(v, tf.float32)))
                    for v in kernels])
  return 0.5 * weight_decay * total


def slice_to_shape(value: np.ndarray, shape: Sequence[int]) -> np.ndarray:
  """The prefix `value[:shape[0], :shape[1], ...]` (SPEC.md section 4).

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
