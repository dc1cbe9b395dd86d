"""bfloat16 compute in a search step: the losses stay close to float32's,
and the controller, cost model and reward stay in float32.

With `use_bfloat16` the builder casts activations and weights to bfloat16
on use (variables stay float32) and computes the logits in float32; what
reads the network (the accuracy, then the reward, the baseline and the
controller's update) keeps float32, as TuNAS computes on TPU
(docs/method.md section 2). The step is built as a GPU's graph plans it and
as XLA builds it (run here without compiling).
"""

from typing import Dict, List

import numpy as np
import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.search import model_fn as search
from tunas_search.config import plan as plan_lib

tf1 = tf.compat.v1
# bfloat16 keeps 8 significant bits: each op rounds by up to 2^-9 (0.2%)
# relative. The rounding errors of the tiny network's ~10 layers largely
# average out in a loss over the batch (its first bfloat16 loss here is
# 0.06% off float32's); 1% is far above that yet below what a wrong
# computation moves the loss by (another architecture's weights, a layer
# skipped).
LOSS_RTOL = 0.01
CLASSIFIER_SCALE = 100.0
ENVIRONMENTS = {'gpu_graph': plan_lib.Environment(has_gpu=True),
                'xla': plan_lib.Environment(xla=True)}


def _config(tmp_path, use_bfloat16: bool):
  # One weight decay for both: with bfloat16 it defaults to TuNAS's 3e-5.
  return tiny.tiny_config(tmp_path, use_bfloat16=use_bfloat16,
                          model_weight_decay=4e-5,
                          unused_weight_steps='every_step')


def _step(config, environment):
  """(graph, TPUEstimatorSpec) of the search step on a seeded batch."""
  plan = plan_lib.resolve(config, environment)
  model_fn = search.make_model_fn(config, plan, tiny.tiny_spec())
  rng = np.random.default_rng(0)
  b, v, size = (config.train_batch_size, config.validation_batch_size,
                config.image_size)
  with tf.Graph().as_default() as graph:
    tf1.set_random_seed(0)
    features = {
        'train_images': tf.constant(rng.normal(size=(b, size, size, 1)),
                                    tf.float32),
        'validation_images': tf.constant(rng.normal(size=(v, size, size, 1)),
                                         tf.float32)}
    labels = {
        'train_labels': tf.constant(rng.integers(0, 10, b), tf.int32),
        'validation_labels': tf.constant(rng.integers(0, 10, v), tf.int32)}
    spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {})
  return graph, spec


@pytest.fixture(scope='module')
def step(tmp_path_factory):
  """(config, graph, spec) of `_step`, built once per dtype and environment
  for the whole module: both tests read the bfloat16 step's graph."""
  built = {}

  def get(use_bfloat16: bool, environment: str):
    key = (use_bfloat16, environment)
    if key not in built:
      config = _config(tmp_path_factory.mktemp(environment), use_bfloat16)
      built[key] = (config, *_step(config, ENVIRONMENTS[environment]))
    return built[key]
  return get


def _initial_values(graph) -> Dict[str, np.ndarray]:
  """Every variable's initial value by name, the classifier's scaled up.

  The classifier starts at N(0, 0.01) (docs/method.md section 2), which
  makes every logit nearly 0 and the loss log(10) whatever the network
  computes; scaled by CLASSIFIER_SCALE, the logits spread over a few units
  and the loss depends on every layer.
  """
  with graph.as_default():
    variables = tf1.global_variables()
    init = tf1.global_variables_initializer()
  with tf1.Session(graph=graph) as session:
    session.run(init)
    values = dict(zip([v.op.name for v in variables],
                      session.run(variables)))
  values['classifier/kernel'] *= CLASSIFIER_SCALE
  return values


def _first_loss(graph, spec, initial: Dict[str, np.ndarray]) -> float:
  """The first step's loss (the shared weights' training loss, computed
  before their update) from `initial` variable values."""
  with graph.as_default():
    variables = tf1.global_variables()
  with tf1.Session(graph=graph) as session:
    # One run: each initializer fed its value.
    session.run([v.initializer for v in variables],
                {v.initial_value: initial[v.op.name] for v in variables})
    return float(session.run(spec.loss))


@pytest.mark.parametrize('environment', ENVIRONMENTS)
def test_bfloat16_losses_are_close_to_float32s(step, environment):
  # The same weights, inputs and architecture (the controller's draw does
  # not depend on the network): only the compute dtype differs.
  _, graph, spec = step(False, environment)
  initial = _initial_values(graph)
  single = _first_loss(graph, spec, initial)
  _, graph, spec = step(True, environment)
  half = _first_loss(graph, spec, initial)
  assert any(op.type == 'Conv2D' and op.outputs[0].dtype == tf.bfloat16
             for op in graph.get_operations())
  assert abs(single - np.log(10)) > 0.5  # The loss reads the network.
  np.testing.assert_allclose(half, single, rtol=LOSS_RTOL)
  assert half != single  # Computed in bfloat16, not float32.


def _controller_ops(graph: tf.Graph, config) -> List[tf.Operation]:
  """Every op the controller's update reads, short of the network.

  A backward walk over data inputs from every write to a controller
  variable (its logits, Adam's moments, the baseline); it stops at the
  ArgMax of the validation logits, which is all of the network that the
  accuracy, and so the reward, reads.
  """
  logits_shape = [config.validation_batch_size, config.num_classes]
  writes = [op for op in graph.get_operations()
            if op.type in _WRITES and op.inputs[0].op.name.startswith(
                search.CONTROLLER_SCOPE + '/')]
  seen, stack = set(), list(writes)
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    if not (op.type == 'ArgMax' and
            op.inputs[0].shape.as_list() == logits_shape):
      stack.extend(t.op for t in op.inputs)
  return list(seen)


_WRITES = ('AssignVariableOp', 'AssignSubVariableOp', 'AssignAddVariableOp')


@pytest.mark.parametrize('environment', ENVIRONMENTS)
def test_the_controller_cost_model_and_reward_stay_float32(step,
                                                           environment):
  config, graph, _ = step(True, environment)
  ops = _controller_ops(graph, config)
  # The walk went from the controller's Adam (Sqrt) through the reward
  # (`abs`), the cost model (MAdds: MatMul, Einsum) and the sampling
  # (LogSoftmax) to the validation logits, which are float32.
  assert {'Sqrt', 'Abs', 'MatMul', 'Einsum', 'LogSoftmax', 'ArgMax'} <= {
      op.type for op in ops}
  logits = [op.inputs[0] for op in ops if op.type == 'ArgMax' and
            op.inputs[0].shape[-1] == config.num_classes]
  assert logits and {t.dtype for t in logits} == {tf.float32}
  half = [op.name for op in ops
          if any(t.dtype.base_dtype == tf.bfloat16
                 for t in list(op.inputs) + list(op.outputs))]
  assert not half
  # Every variable stays float32 (the global step is an int64).
  with graph.as_default():
    variables = tf1.global_variables()
  assert any(v.op.name.startswith(search.CONTROLLER_SCOPE + '/')
             for v in variables)
  assert {v.dtype.base_dtype for v in variables} == {tf.float32, tf.int64}
