"""The search's scaffold: no readiness checks in a one-process search.

The default checks list every uninitialised variable before the first step
(~1 s of start-up for a full space); one process needs neither of them, so a
CPU/GPU search drops them and a TPU search keeps TPUEstimator's default.
"""

import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.config import plan as plan_lib
from tunas_search.search import model_fn as search

tf1 = tf.compat.v1


def test_one_process_search_skips_the_readiness_checks(tmp_path):
  graph, spec = tiny.search_step_spec(tiny.tiny_config(tmp_path))
  scaffold_fn = spec.scaffold_fn
  with graph.as_default():
    # What the default scaffold's check runs.
    uninitialised = tf1.report_uninitialized_variables()
    scaffold = scaffold_fn()
    scaffold.finalize()
    with tf1.Session(graph=graph) as session:
      # Nothing is initialised yet: the default check lists the variables,
      # the search's reports nothing to wait for.
      assert len(session.run(uninitialised)) > 10
      assert session.run(scaffold.ready_op).size == 0
      assert session.run(scaffold.ready_for_local_init_op).size == 0
      # Its init op still initialises every variable.
      session.run(scaffold.init_op)
      assert session.run(uninitialised).size == 0


@pytest.mark.parametrize('overrides', [
    {'use_tpu': True}, {'num_replicas': 2}, {'multi_worker': True}])
def test_tpu_and_multi_replica_searches_keep_the_default(overrides):
  # The plan's layout alone: such a config needs a TPU or several devices
  # to validate.
  layout = plan_lib.Layout(**overrides)
  assert search._scaffold_fn(layout) is None  # pylint: disable=protected-access
