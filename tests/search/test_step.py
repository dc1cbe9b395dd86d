"""`search.step`: one TuNAS step built from its five parts, run in a session.

The numbers each part logs are checked against their formulas in
tests/e2e/test_step_numbers.py; here, that the parts are joined as the paper
joins them: one step increments the global step once, and the reward is the
validation accuracy the (injectable) third part returns.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.config import plan as plan_lib
from tunas_search.runtime import placement
from tunas_search.search import model_fn
from tunas_search.search import step as step_lib
from tunas_search.space import schema

tf1 = tf.compat.v1


def _build(tmp_path, validate_fn=step_lib.validate):
  config = tiny.tiny_config(tmp_path, cost_model='none',
                            rl_cost_model_target=None)
  plan = plan_lib.resolve(config)
  spec = tiny.tiny_spec()
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    rng = np.random.default_rng(0)
    batch = step_lib.Batch(
        tf.constant(rng.normal(size=(4, 28, 28, 1)), tf.float32),
        tf.constant(rng.integers(0, 10, 4), tf.int32),
        tf.constant(rng.normal(size=(8, 28, 28, 1)), tf.float32),
        tf.constant(rng.integers(0, 10, 8), tf.int32))
    built = step_lib.search_step(
        config, plan, schema.decisions(spec), spec, batch,
        tf1.train.get_or_create_global_step(), 3,
        placement.StepDevices(plan), validate_fn)
  return graph, built


def test_one_step_increments_the_global_step_and_rewards_the_accuracy(
    tmp_path):
  graph, built = _build(tmp_path)
  with graph.as_default(), tf1.Session() as session:
    session.run(tf1.global_variables_initializer())
    _, _, accuracy, reward = session.run(
        [built.training.train_op, built.controller['train_op'],
         built.accuracy, built.reward['reward']])
    assert session.run(tf1.train.get_global_step()) == 1
    # Without a cost model the reward is the accuracy, a multiple of 1/8.
    assert reward == accuracy
    assert accuracy * 8 == pytest.approx(round(accuracy * 8), abs=0)


def test_the_third_part_is_a_seam(tmp_path):
  graph, built = _build(tmp_path, model_fn.constant_accuracy(0.25))
  with graph.as_default(), tf1.Session() as session:
    session.run(tf1.global_variables_initializer())
    assert session.run(built.reward['reward']) == 0.25
