"""The spaces of MobileNetV4's two-stage search (search_spaces/mobilenet_v4.py)."""

import dataclasses
import itertools

import numpy as np
import pytest

import search_spaces
from search_spaces import mobilenet_v4
from search_spaces import SearchSpaceError
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.space.specs import Residual, UniversalInvertedBottleneck, Zero

SMALL = mobilenet_v4.CONV_SMALL
STEM_BLOCKS = 5  # Conv-S's first conv and two conv pairs.


def _uibs(tower):
  """(block index, UIB, whether residual) of every UIB of a pruned tower."""
  out = []
  for b, block in enumerate(tower.blocks):
    for layer in block.layers:
      inner = getattr(layer, 'layer', layer)
      if isinstance(inner, UniversalInvertedBottleneck):
        out.append((b, inner, inner is not layer))
  return out


def test_coarse_searches_widths_and_depths_of_ib_blocks():
  spec = search_spaces.get('mobilenet_v4_conv_small_coarse').spec()
  decisions = schema.decisions(spec)
  # Per stage one width and seven optional blocks (the first is always
  # there): 2 + 2 * 7 decisions.
  assert len(decisions) == 16
  assert [d.oneof.choices for d in decisions if d.tag == schema.FILTERS] == [
      (48, 64, 72, 96, 120, 144, 192), (64, 80, 96, 128, 160, 192, 256)]
  assert all(isinstance(d.oneof.choices[1], Zero)
             for d in decisions if d.tag == schema.OP)
  pruned = architecture.prune(spec, architecture.largest(spec))
  uibs = _uibs(pruned)
  assert len(uibs) == 16
  assert {(u.start_kernel_size, u.middle_kernel_size, u.expansion_filters.scale)
          for _, u, _ in uibs} == {(0, 3, 4.0)}  # IB, 3x3, x4.
  assert [u.strides for _, u, _ in uibs] == [2] + [1] * 7 + [2] + [1] * 7


def test_fine_searches_the_nine_instantiations_at_fixed_widths():
  spec = search_spaces.get('mobilenet_v4_conv_small_fine').spec()
  # Conv-S's widths and depths: 96 x 6 and 128 x 6.
  assert mobilenet_v4.default_stages(SMALL) == ((96, 6), (128, 6))
  assert [b.filters for b in spec.blocks[STEM_BLOCKS:-2]] == [96, 128]
  decisions = schema.decisions(spec)
  assert all(d.tag == schema.OP for d in decisions)
  # Per stage: the strided block's op choice and its three kernel
  # decisions, then two per block.
  assert len(decisions) == 2 * (4 + 2 * 5)
  strided = [d for d in decisions if '/layers/0' in d.path]
  assert [(d.path.split('/', 2)[2], d.oneof.choices) for d in strided[:4]] == [
      ('layers/0/choices/0/start_kernel_size', (0, 3, 5)),
      ('layers/0/choices/0/middle_kernel_size', (3, 5)),
      ('layers/0/choices/1/start_kernel_size', (3, 5)),
      ('layers/0', strided[3].oneof.choices)]
  # A strided block: the middle DW or, without one, the start DW strides;
  # 8 instantiations (no strided FFN), 9 elsewhere.
  for first in (strided[:4], strided[4:]):
    pruned = {architecture.prune(spec, ix).blocks[int(
        first[0].path.split('/')[1])].layers[0]
              for ix in _every_choice_of(spec, first)}
    assert {(u.start_kernel_size, u.middle_kernel_size, u.strides,
             u.stride_on_start) for u in pruned} == {
                 (a, k, 2, k == 0) for a in (0, 3, 5) for k in (0, 3, 5)
                 if (a, k) != (0, 0)}
  blocks = {u.start_kernel_size.choices + u.middle_kernel_size.choices
            for b in spec.blocks for l in b.layers
            for u in [getattr(l, 'layer', l)]
            if isinstance(u, UniversalInvertedBottleneck)}
  assert blocks == {(0, 3, 5, 0, 3, 5)}


def _every_choice_of(spec, decisions):
  """The architectures of `spec` that differ only in `decisions`."""
  base = [0] * len(schema.decisions(spec))
  for combo in itertools.product(*[range(d.num_choices) for d in decisions]):
    indices = list(base)
    for d, c in zip(decisions, combo):
      indices[d.index] = c
    yield indices


def _without_skips(tower):
  """The tower with its skipped (identity) layers left out."""
  return dataclasses.replace(tower, blocks=tuple(
      dataclasses.replace(b, layers=tuple(
          l for l in b.layers if not (isinstance(l, Residual)
                                      and isinstance(l.layer, Zero))))
      for b in tower.blocks))


def _padded(tower, most):
  """A fine network with `+skip` layers up to `most` blocks per stage."""
  blocks = list(tower.blocks)
  for b in range(STEM_BLOCKS, STEM_BLOCKS + len(SMALL.stages)):
    skips = (Residual(Zero()),) * (most - len(blocks[b].layers))
    blocks[b] = dataclasses.replace(blocks[b], layers=blocks[b].layers + skips)
  return dataclasses.replace(tower, blocks=tuple(blocks))


@pytest.mark.parametrize('seed', range(4))
def test_a_coarse_result_is_the_ib_network_of_its_fine_space(seed):
  coarse = mobilenet_v4.coarse(SMALL)
  indices = architecture.random_indices(coarse, np.random.default_rng(seed))
  layout, stages = mobilenet_v4.coarse_result(coarse, indices)
  assert layout is SMALL
  name = mobilenet_v4.fine_name(SMALL, stages)
  assert mobilenet_v4.parse_fine_name(name) == (SMALL, stages)
  fine = search_spaces.get(name).spec()
  # Every block an IB with a 3x3 middle depthwise conv: kernels (0, 3); a
  # strided block's op choice is the one with a middle depthwise conv.
  ib3 = [0 if d.path.endswith(('/start_kernel_size', '/layers/0')) else
         d.oneof.choices.index(3) for d in schema.decisions(fine)]
  assert architecture.prune(fine, ib3) == _without_skips(
      architecture.prune(coarse, indices))


@pytest.mark.parametrize('seed', range(4))
def test_the_one_stage_space_holds_every_coarse_and_fine_network(seed):
  rng = np.random.default_rng(seed)
  one_stage = mobilenet_v4.one_stage(SMALL)
  coarse = mobilenet_v4.coarse(SMALL)
  pruned = architecture.prune(coarse, architecture.random_indices(coarse, rng))
  architecture.indices_of(one_stage, pruned)  # Raises if it is not there.
  stages = tuple((int(rng.choice(SMALL.widths(i))), int(rng.integers(1, 9)))
                 for i in range(2))
  fine = mobilenet_v4.fine(SMALL, stages)
  pruned = architecture.prune(fine, architecture.random_indices(fine, rng))
  architecture.indices_of(one_stage, _padded(pruned, 8))


def test_the_stages_of_one_size_are_scored_alike():
  for name in ('mobilenet_v4_conv_small_coarse', 'mobilenet_v4_conv_small_fine',
               'mobilenet_v4_conv_small_search',
               'mobilenet_v4_conv_small_fine_48x1_256x8'):
    space = search_spaces.get(name)
    assert space.scored_as == 'mobilenet_v4_conv_small_search'
    assert space.cost_model == 'madds'
    assert space.default_cost_target == 285e6
    # docs/mobilenet_v4.md: TuNAS's Pixel-1 model knows only its spaces.
    assert 'pixel1_latency' not in cost_models.applicable(
        space.scored_as, space.spec())


@pytest.mark.parametrize('name, message', [
    ('mobilenet_v4_conv_small_fine_97x6_128x6',
     'stage 1 width 97 is not one of the coarse choices [48, 64, 72, 96, '
     '120, 144, 192]'),
    ('mobilenet_v4_conv_small_fine_96x9_128x6',
     'stage 1 has 9 blocks; valid: 1..8'),
    ('mobilenet_v4_conv_small_fine_96x6',
     'mobilenet_v4_conv_small has 2 searched stages, got 1'),
])
def test_a_fine_name_that_is_no_coarse_result_is_one_error(name, message):
  with pytest.raises(SearchSpaceError) as raised:
    search_spaces.get(name)
  assert str(raised.value) == f'{name}: {message}'


def test_other_names_are_not_fine_names():
  assert mobilenet_v4.parse_fine_name('mobilenet_v4_conv_small_fine') is None
  assert mobilenet_v4.parse_fine_name('other_fine_96x6_128x6') is None


def test_coarse_result_refuses_another_space():
  spec = search_spaces.get('mobilenet_v4_conv_small_search').spec()
  with pytest.raises(ValueError, match='not a MobileNetV4 coarse space'):
    mobilenet_v4.coarse_result(spec, architecture.largest(spec))
