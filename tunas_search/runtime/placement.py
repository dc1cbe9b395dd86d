"""Where the ops of a step are placed: the host CPU beside an accelerator."""

from typing import List, Sequence

import tensorflow as tf


HOST = '/device:CPU:0'
# Frame ops of v1 while loops must share a device with their loop.
_FRAME_OPS = frozenset({'Enter', 'RefEnter', 'Exit', 'RefExit',
                        'NextIteration', 'RefNextIteration', 'LoopCond'})


def _small(op: tf.Operation, max_elements: int) -> bool:
  """Whether every output of `op` has a known shape of few elements."""
  return all(t.shape.is_fully_defined() and
             t.shape.num_elements() <= max_elements for t in op.outputs)


def pin_control_ops(ops: Sequence[tf.Operation], device: str = HOST,
                    max_elements: int = 1024) -> List[tf.Operation]:
  """Places on `device` the small ops computed only from ops already there.

  A search's controller runs on the host (`controller_placement`), but the
  network's build derives its control values from the sampled masks where it
  uses them: mask entries, `entry > 0` predicates, their `or`s, the deferred
  update's used flags. Left unplaced, TensorFlow puts each on the GPU, and
  every Switch predicate then travels back to host memory (a device-to-host
  copy that waits for the GPU's queue): ~760 per `proxylessnas_search` step
  on an H100 (docs/benchmarks.md, "GPU, 2026-11-27"). This walks `ops` in
  creation order (topological for the data edges of a graph without while
  loops) and moves each op that has no device or colocation of its own, is
  stateless, has at least one input and only inputs on `device` (placed
  or colocated there, small unplaced Consts, or a Merge's value_index, which
  a GPU keeps in host memory), and whose outputs are all known and at most
  `max_elements` elements; then every small unplaced Const that an op on
  `device` reads. Activations never qualify (they descend from the
  images), so the network's arithmetic stays where it was. Values do not
  change, only where they are computed.

  Returns:
    The ops it placed.
  """
  def free(op):  # No device or colocation of its own.
    return (not op.device and
            op.colocation_groups() == [f'loc:@{op.name}'.encode()])

  def small_const(op):
    return op.type == 'Const' and free(op) and _small(op, max_elements)

  def placed_on(op):
    """Its device, or where the placer will put it: with the op it is
    colocated with, or with the variable whose handle it reads."""
    if op.device:
      return op.device
    if not free(op):
      name = op.colocation_groups()[0].decode()[len('loc:@'):]
      return op.graph.get_operation_by_name(name).device
    handles = [t.op for t in op.inputs if t.dtype == tf.resource]
    return placed_on(handles[0]) if handles else ''

  def there(t):
    # A Merge's value_index lives in host memory on a GPU too.
    host_merge_index = (device == HOST and t.op.type == 'Merge'
                        and t.value_index == 1)
    return (placed_on(t.op) == device or small_const(t.op)
            or host_merge_index)

  placed = []
  for op in ops:
    if (not free(op) or op.type in _FRAME_OPS or op.type == 'Const'
        or not op.inputs or op.op_def.is_stateful
        or not _small(op, max_elements)):
      continue
    if all(there(t) for t in op.inputs):
      op._set_device(device)  # pylint: disable=protected-access
      placed.append(op)
  # A constant read on `device` lives there: a GPU reader then copies it in
  # from the host, which does not wait for the GPU as a copy out would.
  for op in ops:
    if small_const(op) and any(placed_on(c) == device for t in op.outputs
                               for c in t.consumers()):
      op._set_device(device)  # pylint: disable=protected-access
      placed.append(op)
  return placed
