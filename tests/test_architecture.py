"""Tests for architecture strings, pruning and block strings."""

import numpy as np
import pytest

import search_spaces
from tunas_search import architecture
from tunas_search import schema
from tunas_search import specs

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
  # COST_MODEL.md section 8.2.
  expected = ('0:0:0:1:0:0:0:0:0:0:0:1:0:0:1:0:2:0:0:0:0:0:1:0:0:1:0:0:0:2:1:'
              '0:1:0:0:1:0:0:1:0:0:0:1:1:0:1:0:0:1:0:0:1:0:0:0:2:1:0:2:1:0:2:'
              '0:0:2:0:0:0:2:1:0:0:0')
  indices = search_spaces.get('proxylessnas_mobile').default_indices()
  assert architecture.format_indices(indices) == expected


def test_reference_filter_indices_match_cost_model_doc():
  # COST_MODEL.md section 8.3: width positions of the enlarged space.
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
