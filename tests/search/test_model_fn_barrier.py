"""The order of the search step's weight update, read from the graph.

No weight may be updated before every gradient exists and every weight
snapshot has been read (the gradient-sync barrier, docs/method.md section
6). The graph carries that order on an Identity per gradient that waits for
one NoOp; it must reach every update, in the CPU graph and in the XLA one.
"""

import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.config import plan as plan_lib

tf1 = tf.compat.v1


def _search_graph(tmp_path, for_xla: bool, **overrides) -> tf.Graph:
  config = tiny.tiny_config(tmp_path, train_batch_size=4, **overrides)
  graph, _ = tiny.search_step_spec(config, plan_lib.Environment(xla=for_xla))
  return graph


def _ancestors(op: tf.Operation) -> set:
  """Names of every op `op` waits for, through data and control edges."""
  seen, stack = set(), [op]
  while stack:
    node = stack.pop()
    for parent in [t.op for t in node.inputs] + list(node.control_inputs):
      if parent.name not in seen:
        seen.add(parent.name)
        stack.append(parent)
  return seen


def _updates(graph: tf.Graph):
  """The RMSProp updates: the ops, or calls of a function that applies them
  (the deferred form's group updates)."""
  applying = {f.signature.name
              for f in graph.as_graph_def().library.function
              if any(n.op == 'ResourceApplyRMSProp' for n in f.node_def)}
  return [op for op in graph.get_operations()
          if op.type == 'ResourceApplyRMSProp' or op.type in applying]


@pytest.mark.parametrize('for_xla', [False, True], ids=['cpu', 'xla'])
def test_every_weight_update_waits_for_the_barrier(tmp_path, for_xla):
  graph = _search_graph(tmp_path, for_xla)
  updates = _updates(graph)
  assert updates
  barriers = [op.name for op in graph.get_operations()
              if op.name.endswith('gradient_sync_barrier')]
  assert len(barriers) == 1
  for update in updates:
    assert barriers[0] in _ancestors(update), update.name


def test_without_the_barrier_no_update_waits_for_one(tmp_path):
  graph = _search_graph(tmp_path, False, use_gradient_sync_barrier=False,
                        validation_weights='post_update')
  names = [op.name for op in graph.get_operations()]
  assert not [n for n in names if n.endswith('gradient_sync_barrier')]
