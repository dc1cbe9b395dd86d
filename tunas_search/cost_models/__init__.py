"""Registry of cost models: `pixel1_latency`, `madds`, `params`, `measured`.

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

from typing import TYPE_CHECKING, Any, List, Optional

from tunas_search.cost_models.analytic import Madds, Params
from tunas_search.cost_models.base import CostContext, CostModel
from tunas_search.cost_models import measured
from tunas_search.cost_models.measured import LatencyModelError
from tunas_search.cost_models.measured import MeasuredLatency
from tunas_search.cost_models.pixel1 import Pixel1Latency
from tunas_search.registry import Registry

if TYPE_CHECKING:  # Annotation only: the library's config is a higher layer.
  from tunas_search.config import SearchConfig  # pylint: disable=g-bad-import-order

# `cost_model` of a search without a cost model: the reward is the accuracy.
NONE = 'none'

REGISTRY: Registry[CostModel] = Registry('cost model')

for _model in (Pixel1Latency(), Madds(), Params(), MeasuredLatency()):
  REGISTRY.register(_model.name, _model)


def get(name: str) -> CostModel:
  """The cost model registered as `name` (UnknownNameError lists valid)."""
  return REGISTRY.get(name)


def names() -> List[str]:
  """Names of all registered cost models, sorted."""
  return REGISTRY.names()


def applicable(space_name: str, spec: Any,
               cost_model_file: Optional[str] = None) -> List[str]:
  """Names of the cost models that can score architectures of `spec`.

  `measured` counts only with a latency model file (`cost_model_file`).
  """
  return REGISTRY.filter(lambda _, m: m.applies(space_name, spec) and (
      bool(cost_model_file) or not m.needs_file))


def check_file(name: str, context: CostContext) -> None:
  """Checks the file a cost model reads, if it reads one.

  Raises:
    LatencyModelError: one line, when `measured` has no file, an unreadable
      one, or one fitted for another space, image size or input channels.
  """
  if not get(name).needs_file:
    return
  if not context.cost_model_file:
    raise LatencyModelError(f'cost model {name!r} needs --cost_model_file '
                            '(a latency_model.json of '
                            'bin/calibrate_latency.py)')
  measured.load(context.cost_model_file).check(context.space_name, context)


def context_for(config: 'SearchConfig') -> CostContext:
  """The context a search scores architectures in (its step and analysis).

  Args:
    config: the search's config; its `effective_cost_model_space` names the
      space (`cost_model_space`, else the searched space).
  """
  return CostContext(space_name=config.effective_cost_model_space,
                     image_size=config.image_size,
                     num_classes=config.num_classes,
                     input_channels=config.input_channels,
                     cost_model_file=config.cost_model_file)


__all__ = ['NONE', 'CostContext', 'CostModel', 'LatencyModelError',
           'REGISTRY', 'applicable', 'check_file',
           'context_for', 'get', 'names']
