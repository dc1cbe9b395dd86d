"""The real search step computes the same in both width forms.

`supernet_widths=sampled` slices every variable to the sampled width,
`masked` computes at the largest width with masked channels
(docs/method.md section 4). From the same initial values, a few steps of
the real model_fn (warm-ups included) must give the same losses, logged
scalars, sampled architectures and weights after the RMSProp updates.
"""

import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
# pylint: disable=g-import-not-at-top,wrong-import-position
import test_xla
import tiny

STEPS = 4


def _count_slices(graph: tf.Graph) -> int:
  # `widths.narrow`'s slices, the only ones whose shape is not static.
  return sum(op.type == 'StridedSlice'
             and not op.outputs[0].shape.is_fully_defined()
             for op in graph.get_operations())


def test_sampled_and_masked_search_steps_agree(tmp_path):
  # Steps 0-1 are in the op and filter warm-ups, steps 2-3 sample freely
  # and the controller learns from them.
  config = test_xla._search_config(tmp_path)  # pylint: disable=protected-access
  spec = tiny.tiny_spec()
  runs = {}
  start = None
  for form in ('masked', 'sampled'):
    (outputs, initial, final), graph = test_xla._search_steps(  # pylint: disable=protected-access
        tiny.with_overrides(config, supernet_widths=form), spec, 1,
        use_xla=False, steps=STEPS, initial=start)
    start = start or initial
    runs[form] = outputs, final, graph
  masked, masked_end, masked_graph = runs['masked']
  sampled, sampled_end, sampled_graph = runs['sampled']
  # The model_fn builds the form the config names: the sampled form reads
  # every searched-width variable through a slice.
  assert _count_slices(sampled_graph) > _count_slices(masked_graph) + 20
  assert len({tuple(s[2]) for s in sampled}) > 1  # The samples do vary.
  for s, m in zip(sampled, masked):
    np.testing.assert_array_equal(s[2], m[2])  # Same architectures.
  test_xla._check_close(sampled, masked)  # pylint: disable=protected-access
  for name in masked_end:
    np.testing.assert_allclose(sampled_end[name], masked_end[name],
                               rtol=test_xla.RTOL, atol=test_xla.ATOL,
                               err_msg=name)
  assert masked[0][0] != masked[-1][0]  # The shared weights train.
