"""Registry of cost models: `pixel1_latency`, `madds` and `params`.

`NONE` ('none') is the one spelling of "no cost model" (reward = accuracy);
it is not registered, so `get(NONE)` raises.

Usage:
  model = cost_models.get('pixel1_latency')
  context = cost_models.CostContext('proxylessnas_search')
  context = cost_models.context_for(search_config)  # What a search scores in.
  if model.applies(context.space_name, spec):
    ms = model.cost(spec, indices, context)          # numpy, Python float
    ms_tensor = model.tf_cost(masked_spec, context)  # in-graph, float32
"""

from typing import TYPE_CHECKING, Any, List

from tunas_search.cost_models.analytic import Madds, Params
from tunas_search.cost_models.base import CostContext, CostModel
from tunas_search.cost_models.pixel1 import Pixel1Latency
from tunas_search.registry import Registry

if TYPE_CHECKING:  # Annotation only: the library's config is a higher layer.
  from tunas_search.config import SearchConfig  # pylint: disable=g-bad-import-order

# `cost_model` of a search without a cost model: the reward is the accuracy.
NONE = 'none'

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


def context_for(config: 'SearchConfig') -> CostContext:
  """The context a search scores architectures in (its step and analysis).

  Args:
    config: the search's config; its `effective_cost_model_space` names the
      space (`cost_model_space`, else the searched space).
  """
  return CostContext(space_name=config.effective_cost_model_space,
                     image_size=config.image_size,
                     num_classes=config.num_classes,
                     input_channels=config.input_channels)


__all__ = ['NONE', 'CostContext', 'CostModel', 'REGISTRY', 'applicable',
           'context_for', 'get', 'names']
