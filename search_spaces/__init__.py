"""Registry of search spaces and reference architectures.

Each entry knows its model spec, its default architecture (the reference net
itself, or the largest network of a space), the Pixel-1 latency model it can
be scored with, the default cost model and target of a search in it and
whether it trains in bfloat16 by default.

Besides the shipped entries, `get` resolves the MobileNetV4 fine stages of
coarse results (`<size>_fine_<W>x<N>_<W>x<N>`, search_spaces/mobilenet_v4.py),
spaces of other packages (entry points of the group
`tunas_search.search_spaces`) and `MODULE:FUNCTION` references
(search_spaces/plugins.py); those specs are validated first
(search_spaces/validation.py).
"""

import dataclasses
from typing import Any, Callable, Optional, Sequence, Tuple

from absl import logging

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.registry import Registry
from tunas_search.registry import UnknownNameError
from tunas_search.space.specs import ConvTower
from search_spaces import mobilenet_v3_like
from search_spaces import mobilenet_v4
from search_spaces import plugins
from search_spaces import proxylessnas
from search_spaces import validation
from search_spaces.plugins import SearchSpaceError
from search_spaces.validation import SpecError

# The cost models a search defaults to: TuNAS's latency model where it
# applies (the three TuNAS spaces), else MAdds, which counts any spec.
PIXEL1_LATENCY = 'pixel1_latency'
MADDS = 'madds'


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
    default_cost_model: the cost model a search uses unless told otherwise;
      None: pixel1_latency when `pixel1_model` is set, else madds.
      `default_cost_target` is in this model's unit.
    origin: plugins.BUILTIN (shipped here), plugins.PLUGIN (an entry point)
      or plugins.MODULE (named as MODULE:FUNCTION).
    cost_model_space: the space whose calibrated latency model
      (`bin/calibrate_latency.py`) scores this one, when not itself: a
      space that holds every architecture of this one (the MobileNetV4
      stages are scored as their one-stage space).
    image_size: the published input side, describe_arch's default; None:
      224 (TuNAS's).
  """
  name: str
  spec_fn: Callable[[], ConvTower]
  reference_indices: Optional[Callable[[], Sequence[int]]] = None
  pixel1_model: Optional[str] = None
  default_cost_target: Optional[float] = None
  default_use_bfloat16: bool = False
  description: str = ''
  default_cost_model: Optional[str] = None
  origin: str = plugins.BUILTIN
  cost_model_space: Optional[str] = None
  image_size: Optional[int] = None

  @property
  def scored_as(self) -> str:
    """The space name costs are scored under (`CostContext.space_name`)."""
    return self.pixel1_model or self.cost_model_space or self.name

  @property
  def cost_model(self) -> str:
    """The default cost model of a search in this space."""
    if self.default_cost_model is not None:
      return self.default_cost_model
    return PIXEL1_LATENCY if self.pixel1_model else MADDS

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


def _v4_search(layout: mobilenet_v4.Layout) -> dict:
  """What the spaces of one MobileNetV4 size's search share: MAdds and
  its target, the published input side, and one latency calibration (of
  the one-stage space, which holds both stages' architectures)."""
  return dict(default_cost_model=MADDS, image_size=layout.image_size,
              default_cost_target=layout.madds_target,
              cost_model_space=f'{layout.name}_search')


_FINE = ('MobileNetV4 two-stage search, fine stage: the nine UIB '
         'instantiations per block (eight where strided) at widths x blocks ')


def fine_space(layout: mobilenet_v4.Layout,
               stages: Sequence[Tuple[int, int]]) -> SearchSpace:
  """The MobileNetV4 fine stage at a coarse result's (width, blocks) per
  stage (`mobilenet_v4.fine_name`)."""
  return SearchSpace(
      mobilenet_v4.fine_name(layout, stages),
      lambda: mobilenet_v4.fine(layout, stages), **_v4_search(layout),
      description=_FINE + ', '.join(f'{w}x{n}' for w, n in stages))


# docs/mobilenet_v4.md: the spaces of MobileNetV4-Conv-S's search.
_MOBILENET_V4_SEARCH = _v4_search(mobilenet_v4.CONV_SMALL)
_add(SearchSpace(
    'mobilenet_v4_conv_small_coarse',
    mobilenet_v4.mobilenet_v4_conv_small_coarse, **_MOBILENET_V4_SEARCH,
    description='MobileNetV4 two-stage search, coarse stage: widths and '
                'depths of IB x4 k3 blocks (~10^6)'))
_add(SearchSpace(
    'mobilenet_v4_conv_small_fine', mobilenet_v4.mobilenet_v4_conv_small_fine,
    **_MOBILENET_V4_SEARCH, description=_FINE + '96x6, 128x6 (Conv-S\'s; '
    '~10^12)'))
_add(SearchSpace(
    'mobilenet_v4_conv_small_search',
    mobilenet_v4.mobilenet_v4_conv_small_search, **_MOBILENET_V4_SEARCH,
    description='MobileNetV4 one-stage search: widths, depths and both UIB '
                'depthwise kernels (~10^22)'))
for _function, _size, _side in (
    (mobilenet_v4.mobilenet_v4_conv_small, 'S', 224),
    (mobilenet_v4.mobilenet_v4_conv_medium, 'M', 256),
    (mobilenet_v4.mobilenet_v4_conv_large, 'L', 384)):
  _add(SearchSpace(
      _function.__name__, _function,
      reference_indices=lambda f=_function: mobilenet_v4.fixed_indices(f()),
      default_cost_model=MADDS, image_size=_side, cost_model_space=(
          'mobilenet_v4_conv_small_search' if _size == 'S' else None),
      description=f'MobileNetV4-Conv-{_size} (Qin et al. 2024), published '
                  f'at {_side}x{_side}'))


def get(name: str) -> SearchSpace:
  """The space or reference net called `name`.

  Args:
    name: a shipped name, an entry point's name or `MODULE:FUNCTION`.

  Returns:
    The SearchSpace; a user's spec has passed `validation.check_spec`.

  Raises:
    UnknownNameError: for an unknown name, listing the valid ones.
    SearchSpaceError: for a MobileNetV4 fine stage whose widths or depths
      are no coarse result (`mobilenet_v4.fine_name`).
    SearchSpaceError: for a user's space that cannot be loaded or built
      (validation.SpecError for one that fails validation).
  """
  if name in REGISTRY:
    return REGISTRY.get(name)
  try:
    fine = mobilenet_v4.parse_fine_name(name)
  except ValueError as e:
    raise SearchSpaceError(f'{name}: {e}') from None
  if fine:
    return fine_space(*fine)
  if name in plugins.entry_points() or plugins.is_reference_string(name):
    return _load(name)
  raise UnknownNameError(
      f'unknown search space {name!r}; valid choices: {", ".join(names())}, '
      'or MODULE:FUNCTION for a space in your own code')


@plugins.cached
def _load(name: str) -> SearchSpace:
  """Loads and validates an entry point's or a MODULE:FUNCTION's space."""
  if plugins.is_reference_string(name):
    origin, target = plugins.MODULE, plugins.load_reference(name)
  else:
    origin = plugins.PLUGIN
    target = plugins.load_entry_point(name, plugins.entry_points()[name])
  space = _as_space(name, target)
  space = dataclasses.replace(space, name=name, origin=origin)
  spec = plugins.call_spec_function(name, space.spec)
  try:
    validation.check_spec(spec)
  except SpecError as e:
    raise e.in_space(name) from None
  # The spec is frozen and checked: later calls return this very object.
  space = dataclasses.replace(space, spec_fn=lambda: spec)
  if space.is_reference:
    try:
      architecture.validate(spec, space.default_indices())
    except architecture.ArchitectureError as e:
      raise SearchSpaceError(f'{name}: reference_indices: {e}') from None
  return space


def _as_space(name: str, target: Any) -> SearchSpace:
  """A SearchSpace from what a user named: a space, or a spec function."""
  if isinstance(target, SearchSpace):
    return target
  if not callable(target):
    raise SearchSpaceError(f'{name}: expected a SearchSpace or a function '
                           f'returning a spec, got {type(target).__name__}')
  result = plugins.call_spec_function(name, target)
  if isinstance(result, SearchSpace):
    return result
  if not isinstance(result, ConvTower):
    raise SearchSpaceError(f'{name}: expected a specs.ConvTower or a '
                           f'SearchSpace, got {type(result).__name__}')
  doc = (getattr(target, '__doc__', None) or '').strip()
  return SearchSpace(name, target, description=doc.splitlines()[0] if doc
                     else '')


def check_image_size(space: SearchSpace, image_size: int) -> None:
  """Raises SpecError if a user's space collapses an `image_size` input."""
  if space.origin != plugins.BUILTIN:
    try:
      validation.check_spec(space.spec(), image_size)
    except SpecError as e:
      raise e.in_space(space.name) from None


def plugin_names() -> list:
  """Names of installed packages' spaces (entry points), sorted.

  A name that a shipped space already has is skipped with a warning.
  """
  found = []
  for name in sorted(plugins.entry_points()):
    if name in REGISTRY:
      logging.warning('Ignoring entry point %r of %s: a shipped search space '
                      'has that name', name, plugins.ENTRY_POINT_GROUP)
    else:
      found.append(name)
  return found


def names() -> list:
  """All shipped names and installed packages' spaces."""
  return sorted(REGISTRY.names() + plugin_names())


def default_use_bfloat16(name: str) -> bool:
  """What `--use_bfloat16=auto` resolves to for `name`.

  Args:
    name: a registered space or reference net; any other name (one a test
      search recorded) resolves to False.
  """
  if name in REGISTRY:
    return REGISTRY.get(name).default_use_bfloat16
  try:
    return get(name).default_use_bfloat16
  except (UnknownNameError, SearchSpaceError):
    return False


def bfloat16_names() -> list:
  """Names whose `--use_bfloat16=auto` means bfloat16."""
  return REGISTRY.filter(lambda _, s: s.default_use_bfloat16)


def search_space_names() -> list:
  """Names of the real search spaces (not reference nets).

  Installed packages' spaces count as search spaces here, since telling
  would mean importing them.
  """
  return sorted(REGISTRY.filter(lambda _, s: not s.is_reference)
                + plugin_names())


def reference_names() -> list:
  """Names of the reference architectures."""
  return REGISTRY.filter(lambda _, s: s.is_reference)
