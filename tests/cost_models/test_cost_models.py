"""Tests of the cost-model registry and of in-graph vs Python agreement."""

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.registry import UnknownNameError


def _context(name: str) -> cost_models.CostContext:
  return cost_models.CostContext(search_spaces.get(name).pixel1_model or name)


def _tensor_masks(spec, indices):
  return schema.with_masks(spec, [
      tf.constant(m) for m in architecture.one_hot_masks(spec, indices)])


def test_registry_names_and_units():
  assert cost_models.names() == ['madds', 'measured', 'params',
                                 'pixel1_latency']
  assert cost_models.get('pixel1_latency').unit == 'ms'
  assert cost_models.get('madds').name == 'madds'
  with pytest.raises(UnknownNameError,
                     match="unknown cost model 'flops'; valid choices: "
                           'madds, measured, params, pixel1_latency'):
    cost_models.get('flops')


def test_applicable_models_per_space():
  for name in search_spaces.names():
    spec = search_spaces.get(name).spec()
    expected = ['madds', 'params'] + (
        ['pixel1_latency'] if search_spaces.get(name).pixel1_model else [])
    assert cost_models.applicable(_context(name).space_name, spec) == expected


def test_context_is_validated():
  with pytest.raises(ValueError, match='image_size must be a positive int'):
    cost_models.CostContext('proxylessnas_search', image_size=0)


def _names_by_spec():
  """Registered names grouped by spec: a reference net shares its space's."""
  groups = {}
  for name in search_spaces.names():
    groups.setdefault(search_spaces.get(name).spec_fn, []).append(name)
  return list(groups.values())


class _Graph:
  """Placeholders for every mask, the tf_cost of every applicable model and
  a session: built once per spec (~1 s per model on a busy CPU)."""

  def __init__(self, name: str):
    self.spec = search_spaces.get(name).spec()
    self.context = _context(name)
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.masks = [tf.compat.v1.placeholder(tf.float32, [d.num_choices])
                    for d in schema.decisions(self.spec)]
      masked = schema.with_masks(self.spec, self.masks)
      self.costs = {n: cost_models.get(n).tf_cost(masked, self.context)
                    for n in cost_models.applicable(self.context.space_name,
                                                    self.spec)}
    self.session = tf.compat.v1.Session(graph=self.graph)

  def run(self, masks):
    return self.session.run(self.costs, dict(zip(self.masks, masks)))


@pytest.fixture(scope='module')
def graphs():
  cache = {}
  def get(name):
    key = search_spaces.get(name).spec_fn
    if key not in cache:
      cache[key] = _Graph(name)
    return cache[key]
  yield get
  for g in cache.values():
    g.session.close()


@pytest.mark.parametrize('names', _names_by_spec(), ids=lambda n: n[0])
def test_tf_cost_equals_cost_for_random_architectures(names, graphs):
  # Every registered name is scored on its default and random architectures
  # of its spec (a reference net shares its space's spec and graph).
  g = graphs(names[0])
  assert all(c.dtype == tf.float32 and c.shape == [] for c in g.costs.values())
  rng = np.random.default_rng(3)
  architectures = [search_spaces.get(n).default_indices() for n in names]
  architectures += [architecture.random_indices(g.spec, rng) for _ in range(3)]
  for indices in architectures:
    got = g.run(architecture.one_hot_masks(g.spec, indices))
    for n, value in got.items():
      expected = cost_models.get(n).cost(g.spec, indices, g.context)
      # tf_cost accumulates in float32 (up to 29,068 Pixel-1 features, tens
      # of layer terms for madds/params), cost in float64: float32 rounding
      # (6e-8 per op) summed over that many terms stays under 2e-6.
      assert value == pytest.approx(expected, rel=2e-6), (n, indices)


def test_eager_tf_cost_with_tensor_masks():
  space = search_spaces.get('proxylessnas_mobile')
  spec, indices = space.spec(), space.default_indices()
  model = cost_models.get('pixel1_latency')
  got = model.tf_cost(_tensor_masks(spec, indices), _context(space.name))
  assert got.dtype == tf.float32 and got.shape == []
  # The reference value is quoted to 4 decimals (test_pixel1.py); float32
  # adds ~1e-5 ms at 84 ms.
  assert float(got) == pytest.approx(84.4162, abs=1e-3)


def test_op_warmup_mask_averages_the_choices(graphs):
  g = graphs('mobilenet_v3_like_search')
  decisions = schema.decisions(g.spec)
  # The kernel of block 2's first (never skipped) bottleneck: 3 choices,
  # uniform during op warm-up.
  kernel = next(d for d in decisions
                if d.path == 'blocks/2/layers/0/kernel_size')
  indices = architecture.random_indices(g.spec, np.random.default_rng(5))
  warm = architecture.one_hot_masks(g.spec, indices)
  warm[kernel.index] = np.full([3], 1 / 3, np.float32)
  averaged = g.run(warm)
  for n, value in averaged.items():
    per_choice = []
    for k in range(3):
      choice = list(indices)
      choice[kernel.index] = k
      per_choice.append(cost_models.get(n).cost(g.spec, choice, g.context))
    # Every model is linear in each single mask. float32 in graph against
    # float64, as in the test above.
    assert value == pytest.approx(np.mean(per_choice), rel=2e-6), n
