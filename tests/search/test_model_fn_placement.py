"""Where the search step puts its scalar bookkeeping (`controller_placement`).

With one replica on a GPU the controller, cost model, reward, schedules and
summary packing run on the host CPU, so that a few hundred scalar ops do not
each launch a GPU kernel; the network stays on TensorFlow's placement. CI has
no GPU: the placement is read from the graph's requested devices, and a run
checks the pinned step computes what the unpinned one does.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.e2e import tiny
from tunas_search.search import model_fn as search
from tunas_search.config import plan as plan_lib

tf1 = tf.compat.v1
HOST = '/device:CPU:0'
# The network's heavy ops: never pinned (the cost model has MatMuls).
NETWORK_OPS = ('Conv2D', 'DepthwiseConv2dNative', 'FusedBatchNormV3')


def _step(tmp_path, placement: str, has_gpu: bool = False):
  config = tiny.tiny_config(tmp_path, controller_placement=placement)
  plan = plan_lib.resolve(config, plan_lib.Environment(has_gpu=has_gpu))
  model_fn = search.make_model_fn(config, plan, tiny.tiny_spec())
  rng = np.random.default_rng(0)
  with tf.Graph().as_default() as graph:
    tf1.set_random_seed(0)
    b, v = config.train_batch_size, config.validation_batch_size
    features = {
        'train_images': tf.constant(rng.normal(size=(b, 28, 28, 1)),
                                    tf.float32),
        'validation_images': tf.constant(rng.normal(size=(v, 28, 28, 1)),
                                         tf.float32)}
    labels = {'train_labels': tf.constant(rng.integers(0, 10, b), tf.int32),
              'validation_labels': tf.constant(rng.integers(0, 10, v),
                                               tf.int32)}
    spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {})
  return graph, spec


@pytest.fixture(scope='module')
def step(tmp_path_factory):
  """`_step` built once per (placement, has_gpu) for the whole module: the
  placement tests read the graph, and the one that runs a pinned and an
  unpinned step reuses theirs rather than building each again."""
  built = {}

  def get(placement: str, has_gpu: bool = False):
    if (placement, has_gpu) not in built:
      built[placement, has_gpu] = _step(
          tmp_path_factory.mktemp(placement), placement, has_gpu)
    return built[placement, has_gpu]
  return get


def _device(graph, op):
  """The op's requested device, or that of the op it is colocated with (a
  variable's initializer is)."""
  if op.device:
    return op.device
  groups = [g.decode()[len('loc:@'):] for g in op.colocation_groups()]
  others = [graph.get_operation_by_name(n).device for n in groups
            if n != op.name]
  return others[0] if others else ''


def _devices(graph, types=None, prefix=''):
  return {op.name: _device(graph, op) for op in graph.get_operations()
          if (types is None or op.type in types) and op.name.startswith(prefix)}


def _check_host_placement(graph, spec):
  controller = _devices(graph, prefix=search.CONTROLLER_SCOPE + '/')
  assert controller and set(controller.values()) == {HOST}
  _, packed = spec.host_call[1]
  reward = graph.get_collection(search.REPLICA_REWARD)[0]
  indices = graph.get_collection(search.SAMPLED_INDICES)[0]
  for tensor in (packed, reward, indices):
    assert tensor.device == HOST, tensor.name
  network = _devices(graph, NETWORK_OPS)
  assert network and set(network.values()) == {''}


def test_host_placement_pins_the_controller_not_the_network(step):
  _check_host_placement(*step('host'))


def test_auto_pins_to_the_host_when_the_plan_has_a_gpu(step):
  # The plan says where a GPU is (the runner probes it); the step never
  # looks at devices itself.
  _check_host_placement(*step('auto', has_gpu=True))


@pytest.mark.parametrize('placement, has_gpu', [
    ('auto', False), ('default', False), ('default', True)])
def test_without_a_gpu_or_with_default_nothing_is_pinned(step, placement,
                                                        has_gpu):
  graph, _ = step(placement, has_gpu)
  assert set(_devices(graph).values()) == {''}


def test_pinned_and_unpinned_steps_compute_the_same(step):
  results = []
  for placement in ('host', 'default'):
    graph, spec = step(placement)
    _, packed = spec.host_call[1]
    with tf1.Session(graph=graph) as session:
      session.run(tf1.global_variables_initializer())
      runs = [session.run([spec.train_op, spec.loss, packed])[1:]
              for _ in range(3)]
    results.append(runs)
  for (loss_a, packed_a), (loss_b, packed_b) in zip(*results):
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
    np.testing.assert_allclose(packed_a, packed_b, rtol=1e-6, atol=1e-7)
  # The controller learned (the packed logits moved), so the comparison
  # covers its update, not only the first sample.
  assert not np.allclose(results[0][0][1], results[0][-1][1])
