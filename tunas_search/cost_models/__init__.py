"""Registry of cost models: `pixel1_latency`, `madds` and `params`.

Usage:
  model = cost_models.get('pixel1_latency')
  context = cost_models.CostContext('proxylessnas_search')
  if model.applies(context.space_name, spec):
    ms = model.cost(spec, indices, context)          # numpy, Python float
    ms_tensor = model.tf_cost(masked_spec, context)  # in-graph, float32
"""

from typing import Any, List

from tunas_search.cost_models.analytic import Madds, Params
from tunas_search.cost_models.base import CostContext, CostModel
from tunas_search.cost_models.pixel1 import Pixel1Latency
from tunas_search.registry import Registry

REGISTRY: Registry[CostModel] = Registry('cost model')

for _model in (Pixel1Latency(), Madds(), Params()):
  REGISTRY.register(_model.name, _model)


def get(name: str) -> CostModel:
  """The cost model registered as `name` (UnknownNameError lists valid)."""
  return REGISTRY.get(name)


def names() -> List[str]:
  """Names of all registered cost models, sorted."""
  return REGISTRY.names()


def applicable(space_name: str, spec: Any) -> List[str]:
  """Names of the cost models that can score architectures of `spec`."""
  return REGISTRY.filter(lambda _, m: m.applies(space_name, spec))


__all__ = ['CostContext', 'CostModel', 'REGISTRY', 'applicable', 'get',
           'names']
