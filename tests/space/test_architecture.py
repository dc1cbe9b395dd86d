"""Tests for architecture strings, pruning and block strings."""

import re

import numpy as np
import pytest

import search_spaces
from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.space import specs

_SPACES = search_spaces.names()


@pytest.mark.parametrize('name', _SPACES)
def test_indices_round_trip_through_strings(name):
  spec = search_spaces.get(name).spec()
  rng = np.random.default_rng(0)
  for _ in range(5):
    indices = architecture.random_indices(spec, rng)
    text = architecture.format_indices(indices)
    assert architecture.parse_indices(text, spec) == indices


@pytest.mark.parametrize('name', _SPACES)
def test_block_strings_round_trip(name):
  spec = search_spaces.get(name).spec()
  rng = np.random.default_rng(1)
  for _ in range(5):
    pruned = architecture.prune(spec, architecture.random_indices(spec, rng))
    text = architecture.block_string(pruned)
    assert architecture.parse_block_string(text) == pruned
    assert architecture.block_string(
        architecture.parse_block_string(text)) == text


def test_pruned_spec_has_no_decisions_left():
  spec = search_spaces.get('mobilenet_v3_like_search').spec()
  pruned = architecture.prune(spec, architecture.largest(spec))
  assert schema.decisions(pruned) == []


def test_proxylessnas_mobile_matches_the_published_encoding():
  # docs/cost_models.md
  expected = ('0:0:0:1:0:0:0:0:0:0:0:1:0:0:1:0:2:0:0:0:0:0:1:0:0:1:0:0:0:2:1:'
              '0:1:0:0:1:0:0:1:0:0:0:1:1:0:1:0:0:1:0:0:1:0:0:0:2:1:0:2:1:0:2:'
              '0:0:2:0:0:0:2:1:0:0:0')
  indices = search_spaces.get('proxylessnas_mobile').default_indices()
  assert architecture.format_indices(indices) == expected


def test_reference_filter_indices_match_cost_model_doc():
  # docs/cost_models.md: width positions of the enlarged space.
  positions = (0, 2, 15, 28, 41, 54, 67, 71, 72)
  v2 = search_spaces.get('mobilenet_v2').default_indices()
  mnas = search_spaces.get('mnasnet_b1').default_indices()
  assert [v2[p] for p in positions] == [3, 1, 2, 2, 3, 2, 1, 1, 4]
  assert [mnas[p] for p in positions] == [3, 1, 2, 3, 4, 2, 2, 1, 4]


def test_mobilenet_v2_block_string():
  spec = search_spaces.get('mobilenet_v2')
  text = architecture.block_string(
      architecture.prune(spec.spec(), spec.default_indices()))
  assert text.startswith('32: conv3_s2, relu | 16: sep3_relu, endpoint | '
                         '24: ib_k3_e6_s2_relu, +ib_k3_e6_relu, +skip, +skip')
  assert text.endswith('1280: conv1, relu, gap')


@pytest.mark.parametrize('text, message', [
    ('0:1:x', "entry 2 is 'x'; expected a non-negative integer"),
    ('0:-1', "entry 1 is '-1'"),
    ('0:0', 'has 2 indices but the search space has 73 decisions'),
])
def test_malformed_strings_are_clear_errors(text, message):
  spec = search_spaces.get('proxylessnas_search').spec()
  with pytest.raises(architecture.ArchitectureError, match=message):
    architecture.parse_indices(text, spec)


def test_out_of_range_index_names_position_path_and_range():
  spec = search_spaces.get('proxylessnas_search').spec()
  indices = list(architecture.largest(spec))
  indices[3] = 3
  with pytest.raises(architecture.ArchitectureError,
                     match=r'index 3 at position 3 \(blocks/2/layers/0/choices/'
                           r'0/kernel_size\) is out of range; valid: 0..2'):
    architecture.validate(spec, indices)


def test_canonicalize_zeroes_indices_under_skipped_layers():
  spec = search_spaces.get('proxylessnas_search').spec()
  indices = list(architecture.largest(spec))
  indices[6:9] = [2, 1, 1]  # blocks/2/layers/1: k7, x6, but skipped.
  canonical = architecture.canonicalize(spec, indices)
  assert canonical[6:9] == [0, 0, 1]
  assert architecture.prune(spec, canonical) == architecture.prune(spec, indices)


def test_largest_never_picks_skip():
  spec = search_spaces.get('proxylessnas_search').spec()
  pruned = architecture.prune(spec, architecture.largest(spec))
  tokens = architecture.block_string(pruned)
  assert 'skip' not in tokens and 'ib_k7_e6' in tokens


@pytest.mark.parametrize('text, message', [
    ('32 conv3', 'malformed block'),
    ('32: conv3_s2, warp', "unknown layer token 'warp'"),
    ('32: ib_k3_e6_relu_fast', "unknown flag 'fast'"),
])
def test_malformed_block_strings(text, message):
  with pytest.raises(architecture.ArchitectureError, match=message):
    architecture.parse_block_string(text)


def test_with_indices_attaches_one_hot_masks():
  spec = specs.Block((specs.Conv(schema.OneOf([3, 5], schema.OP)),),
                     schema.OneOf([8, 16, 24], schema.FILTERS))
  masked = architecture.with_indices(spec, [1, 2])
  masks = [d.oneof.mask for d in schema.decisions(masked)]
  np.testing.assert_array_equal(masks[0], [0, 1])
  np.testing.assert_array_equal(masks[1], [0, 0, 1])


def test_empty_architecture_string_has_no_indices():
  assert architecture.parse_indices('') == []
  assert architecture.parse_indices('  ') == []
  assert architecture.parse_indices(' 1 : 2 ') == [1, 2]


_PRUNE_FIRST = ('block strings need a pruned spec (no OneOf); call '
                'architecture.prune first')


def _full_match(message):
  return f'^{re.escape(message)}$'


def test_block_string_of_an_unpruned_spec_is_refused():
  tower = specs.ConvTower((specs.Block((specs.Conv(3),),
                                       schema.OneOf([8, 16], schema.FILTERS)),))
  with pytest.raises(architecture.ArchitectureError,
                     match=_full_match(_PRUNE_FIRST)):
    architecture.block_string(tower)
  tower = specs.ConvTower((specs.Block(
      (schema.OneOf([specs.Conv(3), specs.Zero()], schema.OP),), 8),))
  with pytest.raises(architecture.ArchitectureError,
                     match=_full_match(_PRUNE_FIRST)):
    architecture.block_string(tower)


def test_block_string_of_a_record_without_a_token():
  tower = specs.ConvTower((specs.Block((specs.FilterMultiplier(2.0),), 8),))
  with pytest.raises(architecture.ArchitectureError, match=_full_match(
      'no block-string form for FilterMultiplier')):
    architecture.block_string(tower)


def test_every_layer_token_round_trips():
  # Everything the TuNAS spaces do not use: another filters base, strided
  # separable convs, non-default activations, a conv without BN.
  tower = specs.ConvTower((
      specs.Block((specs.Conv(3, 2, use_batch_norm=False),
                   specs.Activation('swish6'),
                   specs.SeparableConv(5, 2, 'relu6')), 12),
      specs.Block((specs.Residual(specs.DepthwiseBottleneck(
          7, specs.FilterMultiplier(2.5), True, 2, 'swish6', 'relu6',
          'identity')),
                   specs.DepthwiseBottleneck(3, specs.FilterMultiplier(1.0)),
                   specs.Residual(specs.Zero()), specs.DetectionEndpoint(),
                   specs.GlobalAveragePool()), 20),
  ), filters_base=4)
  text = ('base4; 12: conv3_s2_nobn, swish6, sep5_s2_relu6 | '
          '20: +ib_k7_e2.5_s2_swish6_se_sei-relu6_seg-identity, ib_k3_e1_relu, '
          '+skip, endpoint, gap')
  assert architecture.block_string(tower) == text
  assert architecture.parse_block_string(text) == tower
  # A strided UIB without a middle depthwise conv (its start one strides).
  uib = specs.UniversalInvertedBottleneck(5, 0, specs.FilterMultiplier(4.0),
                                          2)
  assert architecture.parse_block_string('8: uib_a5_k0_e4_s2_relu') == (
      specs.ConvTower((specs.Block((uib,), 8),)))
  assert architecture.block_string(specs.ConvTower((specs.Block((uib,), 8),))
                                   ) == '8: uib_a5_k0_e4_s2_relu'
  assert architecture.parse_block_string(
      '8: ib_k3_e6_relu_seg-relu') == specs.ConvTower((specs.Block((
          specs.DepthwiseBottleneck(3, specs.FilterMultiplier(6.0),
                                    se_gating_activation='relu'),), 8),))


def test_base_prefix_needs_its_semicolon():
  # Without ';' the text is a block list, and 'base8' is no filter count.
  with pytest.raises(architecture.ArchitectureError,
                     match="^malformed block 'base8: conv3'"):
    architecture.parse_block_string('base8: conv3')
  assert architecture.parse_block_string('base16; 32: conv3').filters_base == 16
  assert architecture.parse_block_string('32: conv3').filters_base == 8


_BLOCK_FORMAT = 'expected "<filters>: <layer>, <layer>, ..."'
_IB_FORMAT = 'expected ib_k<kernel>_e<expansion>[_s<stride>]_<act>'
_UIB_FORMAT = ('expected uib_a<start kernel>_k<middle kernel>_e<expansion>'
               '[_s<stride>]_<act> (kernel 0: none)')


@pytest.mark.parametrize('text, message', [
    ('32 conv3', f"malformed block '32 conv3'; {_BLOCK_FORMAT}"),
    ('x: conv3', f"malformed block 'x: conv3'; {_BLOCK_FORMAT}"),
    ('32', f"malformed block '32'; {_BLOCK_FORMAT}"),
    ('8: conv3 | 16 conv1', f"malformed block '16 conv1'; {_BLOCK_FORMAT}"),
    ('8: conv3: x', "malformed layer token 'conv3: x': invalid literal for "
                    "int() with base 10: '3: x'"),
    ('8: conv3_s2_bn', "malformed conv token 'conv3_s2_bn'"),
    ('8: sep3_s2', "malformed separable-conv token 'sep3_s2'"),
    ('8: sep3_relu_relu', "malformed separable-conv token 'sep3_relu_relu'"),
    ('8: ib_k3', f"malformed bottleneck token 'ib_k3'; {_IB_FORMAT}"),
    ('8: ib_x3_e6_relu',
     f"malformed bottleneck token 'ib_x3_e6_relu'; {_IB_FORMAT}"),
    ('8: ib_k3_x6_relu',
     f"malformed bottleneck token 'ib_k3_x6_relu'; {_IB_FORMAT}"),
    ('8: ib_k3_e6_s2', "bottleneck token 'ib_k3_e6_s2' has no activation"),
    ('8: ib_k3_e6_relu_fast', "unknown flag 'fast' in 'ib_k3_e6_relu_fast'; "
                              'valid: se, sei-<act>, seg-<act>'),
    ('8: ib_kx_e6_relu', "malformed layer token 'ib_kx_e6_relu': invalid "
                         "literal for int() with base 10: 'x'"),
    ('8: uib_a3_e4_relu', f"malformed UIB token 'uib_a3_e4_relu'; "
                          f'{_UIB_FORMAT}'),
    ('8: uib_ax_k3_e4_relu', f"malformed UIB token 'uib_ax_k3_e4_relu'; "
                             f'{_UIB_FORMAT}'),
    ('8: uib_a3_k3_e4_s2', "UIB token 'uib_a3_k3_e4_s2' needs one activation "
                           'after the stride, and nothing else'),
    ('8: uib_a0_k0_e4_s2_relu',
     "malformed layer token 'uib_a0_k0_e4_s2_relu': a UIB with stride 2 and "
     'no middle depthwise conv strides its start depthwise conv; '
     'start_kernel_size 0 may be 0 (none), a strided FFN'),
    ('8: warp', "unknown layer token 'warp'; valid: conv.., sep.., ib_.., "
                'uib_.., skip, gap, endpoint, +<layer>, relu, relu6, swish6, '
                'sigmoid, identity'),
])
def test_block_string_errors_name_the_bad_part(text, message):
  with pytest.raises(architecture.ArchitectureError,
                     match=_full_match(message)):
    architecture.parse_block_string(text)


def test_largest_of_a_decision_with_only_skips_is_0():
  spec = [schema.OneOf([specs.Zero(), specs.Zero()], schema.OP),
          schema.OneOf([specs.Zero(), specs.Conv(3), specs.Conv(5),
                        specs.Zero()], schema.OP)]
  assert architecture.largest(spec) == [0, 2]


def test_one_hot_masks_are_float32():
  spec = [schema.OneOf([1, 2, 3], schema.OP)]
  (mask,) = architecture.one_hot_masks(spec, [2])
  assert mask.dtype == np.float32 and mask.tolist() == [0.0, 0.0, 1.0]


def test_only_the_first_semicolon_ends_the_base_prefix():
  with pytest.raises(architecture.ArchitectureError, match=_full_match(
      "malformed layer token 'conv3; relu': invalid literal for int() with "
      "base 10: '3; relu'")):
    architecture.parse_block_string('base4; 8: conv3; relu')


def test_widest_index_compares_values_not_positions():
  def widest(choices):
    (d,) = schema.decisions([schema.OneOf(choices, schema.FILTERS)])
    return architecture.widest_index(d)
  assert widest([16, 32, 8]) == 1
  assert widest([2.5, 1.0]) == 0
  assert widest([specs.FilterMultiplier(3.0), specs.FilterMultiplier(6.0),
                 specs.FilterMultiplier(1.0)]) == 1
  assert widest([8, 16, 16]) == 1  # The first of equal widths.
  assert widest([4]) == 0


@pytest.mark.parametrize('bad', ['a', True, None])
def test_widest_index_refuses_choices_without_a_width(bad):
  (d,) = schema.decisions({'w': schema.OneOf([8, bad], schema.FILTERS)})
  with pytest.raises(ValueError, match=_full_match(
      f'decision w: cannot compare the width of choice {bad!r}; expected an '
      'int or FilterMultiplier')):
    architecture.widest_index(d)


def test_malformed_base_prefix_is_an_architecture_error():
  with pytest.raises(architecture.ArchitectureError) as error:
    architecture.parse_block_string('basex; 8: conv3')
  assert str(error.value) == ("malformed prefix 'basex'; expected "
                              '"base<N>; " with N a whole number')


def test_indices_of_inverts_prune_for_every_reference_net():
  for name in search_spaces.reference_names():
    space = search_spaces.get(name)
    spec, indices = space.spec(), list(space.default_indices())
    pruned = architecture.prune(spec, indices)
    assert architecture.indices_of(spec, pruned) == architecture.canonicalize(
        spec, indices)
    # Through the block string too: the reference nets are written that way.
    assert architecture.indices_of(spec, architecture.parse_block_string(
        architecture.block_string(pruned))) == architecture.canonicalize(
            spec, indices)


def test_indices_of_refuses_a_network_outside_the_space():
  spec = search_spaces.get('proxylessnas_search').spec()
  outside = architecture.parse_block_string(
      search_spaces.proxylessnas.MOBILENET_V2)  # Widths of another space.
  with pytest.raises(architecture.ArchitectureError,
                     match='not an architecture of this space'):
    architecture.indices_of(spec, outside)
