"""Registry of search spaces and reference architectures.

Each entry knows its model spec, its default architecture (the reference net
itself, or the largest network of a space), the Pixel-1 latency model it can
be scored with, the default latency target of a search in it and whether it
trains in bfloat16 by default.
"""

import dataclasses
from typing import Callable, Optional, Sequence, Tuple

from tunas_search import architecture
from tunas_search import schema
from tunas_search.registry import Registry
from tunas_search.specs import ConvTower
from search_spaces import mobilenet_v3_like
from search_spaces import proxylessnas


@dataclasses.dataclass(frozen=True)
class SearchSpace:
  """A registered search space or reference architecture.

  Attributes:
    name: registry name.
    spec_fn: builds the model spec.
    reference_indices: for a reference net, its architecture in `spec_fn()`;
      None for a search space.
    pixel1_model: key of the Pixel-1 latency model for `spec_fn()`, or None.
    default_cost_target: default latency target in simulated Pixel-1 ms
      (docs/method.md section 5).
    default_use_bfloat16: what `--use_bfloat16=auto` resolves to. As in the
      original TuNAS, True only for mobilenet_v3_like_search (docs/method.md
      section 2).
    description: one line for `--help` and reports.
  """
  name: str
  spec_fn: Callable[[], ConvTower]
  reference_indices: Optional[Callable[[], Sequence[int]]] = None
  pixel1_model: Optional[str] = None
  default_cost_target: Optional[float] = None
  default_use_bfloat16: bool = False
  description: str = ''

  @property
  def is_reference(self) -> bool:
    return self.reference_indices is not None

  def spec(self) -> ConvTower:
    return self.spec_fn()

  def default_indices(self) -> Tuple[int, ...]:
    """The reference architecture, or the largest network of a space."""
    if self.reference_indices is not None:
      return tuple(self.reference_indices())
    return tuple(architecture.largest(self.spec()))

  def num_decisions(self) -> int:
    return len(schema.decisions(self.spec()))


REGISTRY: Registry[SearchSpace] = Registry('search space')


def _add(space: SearchSpace) -> None:
  REGISTRY.register(space.name, space)


_add(SearchSpace(
    'proxylessnas_search', proxylessnas.proxylessnas_search,
    pixel1_model='proxylessnas_search', default_cost_target=84.0,
    description='ProxylessNAS space: kernels, expansions and skips (~10^21)'))
_add(SearchSpace(
    'proxylessnas_enlarged_search', proxylessnas.proxylessnas_enlarged_search,
    pixel1_model='proxylessnas_enlarged_search', default_cost_target=84.0,
    description='ProxylessNAS space with searched block widths (~10^28)'))
_add(SearchSpace(
    'mobilenet_v3_like_search', mobilenet_v3_like.mobilenet_v3_like_search,
    pixel1_model='mobilenet_v3_like_search', default_cost_target=57.0,
    default_use_bfloat16=True,
    description='MobileNetV3-like space: adds squeeze-excite and widths '
                '(~10^43)'))
_add(SearchSpace(
    'proxylessnas_mobile', proxylessnas.proxylessnas_search,
    reference_indices=proxylessnas.proxylessnas_mobile_indices,
    pixel1_model='proxylessnas_search', default_cost_target=84.0,
    description='ProxylessNAS-Mobile (Cai et al. 2019)'))
_add(SearchSpace(
    'mobilenet_v2', proxylessnas.proxylessnas_enlarged_search,
    reference_indices=proxylessnas.mobilenet_v2_indices,
    pixel1_model='proxylessnas_enlarged_search', default_cost_target=84.0,
    description='MobileNetV2 1.0 (Sandler et al. 2018)'))
_add(SearchSpace(
    'mnasnet_b1', proxylessnas.proxylessnas_enlarged_search,
    reference_indices=proxylessnas.mnasnet_b1_indices,
    pixel1_model='proxylessnas_enlarged_search', default_cost_target=84.0,
    description='MnasNet-B1 (Tan et al. 2019)'))
_add(SearchSpace(
    'mobilenet_v3_large', mobilenet_v3_like.mobilenet_v3_large,
    reference_indices=lambda: mobilenet_v3_like.mobilenet_v3_large_indices(
        mobilenet_v3_like.mobilenet_v3_large()),
    default_cost_target=57.0,
    description='MobileNetV3-Large 1.0 (Howard et al. 2019); no Pixel-1 '
                'model (its widths are outside mobilenet_v3_like_search)'))


def get(name: str) -> SearchSpace:
  """The entry registered as `name` (UnknownNameError lists valid names)."""
  return REGISTRY.get(name)


def names() -> list:
  """All registered names."""
  return REGISTRY.names()


def default_use_bfloat16(name: str) -> bool:
  """What `--use_bfloat16=auto` resolves to for `name`.

  Args:
    name: a registered space or reference net; any other name (one a test
      search recorded) resolves to False.
  """
  return name in REGISTRY and REGISTRY.get(name).default_use_bfloat16


def bfloat16_names() -> list:
  """Names whose `--use_bfloat16=auto` means bfloat16."""
  return REGISTRY.filter(lambda _, s: s.default_use_bfloat16)


def search_space_names() -> list:
  """Names of the real search spaces (not reference nets)."""
  return REGISTRY.filter(lambda _, s: not s.is_reference)


def reference_names() -> list:
  """Names of the reference architectures."""
  return REGISTRY.filter(lambda _, s: s.is_reference)
