"""Tests of the Pixel-1 latency model: layout, reference scores, data file."""

import hashlib
import re

import numpy as np
import pytest

import search_spaces
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.cost_models import pixel1
from tunas_search.space.specs import Block, Conv, ConvTower, Zero

SPACES = ('proxylessnas_search', 'proxylessnas_enlarged_search',
          'mobilenet_v3_like_search')
MODEL = cost_models.get('pixel1_latency')

# docs/cost_models.md: the test architecture of the original TuNAS
# cost-model test, asserted there to score 84 +- 1 ms.
TEST_ARCHITECTURE = (
    '0:0:0:1:0:0:0:0:1:0:0:1:0:0:1:0:1:1:0:1:0:0:1:0:0:0:0:0:0:2:1:0:1:1:0:2:'
    '1:0:2:1:0:0:1:1:0:0:0:0:1:0:0:1:0:0:0:1:1:0:2:0:0:0:0:0:1:0:0:0:2:1:0:0:0')


def _score(name: str, indices) -> float:
  space = search_spaces.get(name)
  context = cost_models.CostContext(space.pixel1_model)
  return MODEL.cost(space.spec(), indices, context)


@pytest.mark.parametrize('name,num_features,num_decisions', [
    ('proxylessnas_search', 144, 73),
    ('proxylessnas_enlarged_search', 5983, 73),
    ('mobilenet_v3_like_search', 29068, 86)])
def test_feature_and_index_lengths(name, num_features, num_decisions):
  spec = search_spaces.get(name).spec()
  assert pixel1.num_features(spec) == num_features  # docs/cost_models.md
  assert len(schema.decisions(spec)) == num_decisions
  assert len(pixel1.load_models()[name][0]) == num_features


def test_segment_offsets_match_appendix_b():
  enlarged = pixel1.segments(
      search_spaces.get('proxylessnas_enlarged_search').spec())
  assert len(enlarged) == 33
  assert (enlarged[9].offset, enlarged[9].size) == (532, 144)
  assert (enlarged[15].outputs, enlarged[15].inputs,
          enlarged[15].layer_size) == (7, 7, 7)
  v3 = pixel1.segments(search_spaces.get('mobilenet_v3_like_search').spec())
  assert (v3[0].inputs, v3[0].size) == (None, 8)
  assert (v3[14].offset, v3[14].size) == (7368, 1512)
  assert (v3[32].offset, v3[32].size) == (29019, 49)


def test_reference_scores():
  # ProxylessNAS-Mobile at 84.4 ms is the target TuNAS used for this space
  # (docs/method.md section 5: 84 ms); the others are regression values. All are
  # quoted to 4 decimals, hence abs=1e-3 (float64, so nothing else varies).
  assert _score('proxylessnas_mobile', search_spaces.get(
      'proxylessnas_mobile').default_indices()) == pytest.approx(84.4162,
                                                                 abs=1e-3)
  assert _score('mobilenet_v2', search_spaces.get(
      'mobilenet_v2').default_indices()) == pytest.approx(77.2223, abs=1e-3)
  assert _score('mnasnet_b1', search_spaces.get(
      'mnasnet_b1').default_indices()) == pytest.approx(84.5118, abs=1e-3)


def test_original_test_architecture_within_84_plus_minus_1():
  indices = architecture.parse_indices(TEST_ARCHITECTURE)
  score = _score('proxylessnas_search', indices)
  assert abs(score - 84.0) <= 1.0
  assert score == pytest.approx(84.0167, abs=1e-3)  # Quoted to 4 decimals.


@pytest.mark.parametrize('name', SPACES)
def test_each_segment_holds_exactly_one_one(name):
  spec = search_spaces.get(name).spec()
  rng = np.random.default_rng(7)
  for _ in range(3):
    masked = architecture.with_indices(
        spec, architecture.random_indices(spec, rng))
    x = pixel1.features(masked)
    assert set(np.unique(x)) <= {0.0, 1.0}
    for seg in pixel1.segments(spec):
      assert x[seg.offset:seg.offset + seg.size].sum() == 1.0, seg


def _reachable(spec) -> np.ndarray:
  """Positions that some architecture sets to 1 (docs/cost_models.md).

  Only the block widths couple segments. For each block b and each of its
  width choices, all-ones masks everywhere else light up every position of
  b's segments that an architecture with that width can reach.
  """
  decisions = schema.decisions(spec)
  segs = pixel1.segments(spec)
  reachable = np.zeros(pixel1.num_features(spec), bool)
  for d in decisions:
    if not (d.path.startswith('blocks/') and d.path.endswith('/filters')):
      continue
    block = int(d.path.split('/')[1])
    for o in range(d.num_choices):
      masks = [np.ones(e.num_choices) for e in decisions]
      masks[d.index] = np.eye(d.num_choices)[o]
      x = pixel1.features(schema.with_masks(spec, masks))
      for s in segs:
        if s.block == block:
          sl = slice(s.offset, s.offset + s.size)
          reachable[sl] |= x[sl] > 0
  return reachable


@pytest.mark.parametrize('name', SPACES)
def test_unreachable_positions_are_exactly_the_kernel_zeros(name):
  spec = search_spaces.get(name).spec()
  kernel = pixel1.load_models()[name][0]
  np.testing.assert_array_equal(_reachable(spec), kernel != 0.0)


def test_zero_features_give_the_bias():
  spec = search_spaces.get('proxylessnas_enlarged_search').spec()
  zero = schema.with_masks(
      spec, [np.zeros(d.num_choices) for d in schema.decisions(spec)])
  context = cost_models.CostContext('proxylessnas_enlarged_search')
  # The shipped float32 bias, quoted to 4 decimals (rounding <= 5e-5).
  assert float(MODEL.tf_cost(zero, context)) == pytest.approx(116.6797,
                                                              abs=1e-4)


def test_applies_only_to_the_matching_space():
  v3_like = search_spaces.get('mobilenet_v3_like_search').spec()
  assert MODEL.applies('mobilenet_v3_like_search', v3_like)
  assert not MODEL.applies('proxylessnas_search', v3_like)
  assert not MODEL.applies('mobilenet_v3_large',
                           search_spaces.get('mobilenet_v3_large').spec())
  assert not MODEL.applies(None, v3_like)


def test_wrong_space_is_a_clear_error():
  spec = search_spaces.get('proxylessnas_search').spec()
  indices = search_spaces.get('proxylessnas_mobile').default_indices()
  with pytest.raises(ValueError, match='144 Pixel-1 features but the '
                     "'proxylessnas_enlarged_search' model has 5983"):
    MODEL.cost(spec, indices,
               cost_models.CostContext('proxylessnas_enlarged_search'))
  with pytest.raises(ValueError, match="no Pixel-1 latency model for search "
                     "space 'nope'; valid: mobilenet_v3_like_search"):
    MODEL.cost(spec, indices, cost_models.CostContext('nope'))


def test_missing_mask_is_a_clear_error():
  spec = search_spaces.get('proxylessnas_search').spec()
  with pytest.raises(ValueError, match="OneOf 'blocks/0/filters' has no mask"):
    pixel1.features(spec)


def test_data_checksums_match_readme():
  expected = {  # README.md next to the data, '<f4' bytes.
      'proxylessnas_search/kernel':
          '1d2ed0f9ccdee031c06d06eed9abe78be2cafb55395bd6e5fe37b2884b5f8259',
      'proxylessnas_enlarged_search/kernel':
          '30ebaca4246895d4d782241e8b99864a29b7200de342b88d29eb0456c649b9de',
      'mobilenet_v3_like_search/kernel':
          '94987a1e0fdf2a5ab37391be76faab1d25fc1fbcb5a8f93e12a172e352251998',
      'mobilenet_v3_like_search/bias':
          '6ae67563e610f15ba6628e4c62098c0dd74052808ad5ebb404812f5c6d235f06',
  }
  with np.load(pixel1.DATA_FILE) as data:
    for key, digest in expected.items():
      raw = data[key].astype('<f4').tobytes()
      assert hashlib.sha256(raw).hexdigest() == digest, key


def test_model_names_are_the_three_tunas_spaces():
  assert pixel1.model_names() == sorted(SPACES)


def _small_tower(filters):
  """One block: a searched 3/5 kernel, then a fixed conv."""
  return ConvTower((Block((Conv(schema.OneOf((3, 5), schema.OP)), Conv(1)),
                          filters),))


def test_fixed_width_block_keeps_only_searched_layers():
  tower = _small_tower(8)
  # The searched conv has 2 features (a segment of size 2 is kept); the
  # fixed conv has 1 and is dropped.
  assert pixel1.segments(tower) == [pixel1.Segment(0, 0, None, None, 2, 0, 2)]
  assert pixel1.num_features(tower) == 2
  x = pixel1.features(architecture.with_indices(tower, [1]))
  np.testing.assert_array_equal(x, [0.0, 1.0])


def test_searched_width_multiplies_the_segments():
  tower = _small_tower(schema.OneOf((8, 16, 24), schema.FILTERS))
  # Layer 0: 3 widths x 2 kernels; layer 1 (fixed, after the first layer of
  # the same block): 3 widths x 3 previous widths x 1.
  assert pixel1.segments(tower) == [
      pixel1.Segment(0, 0, 3, None, 2, 0, 6),
      pixel1.Segment(0, 1, 3, 3, 1, 6, 9)]
  # Kernel 5 (index 1), width 16 (index 1): positions 1 * 2 + 1 and
  # 6 + 1 * 3 + 1.
  x = pixel1.features(architecture.with_indices(tower, [1, 1]))
  assert np.flatnonzero(x).tolist() == [3, 10]


def test_a_spec_without_decisions_has_one_constant_feature():
  tower = ConvTower((Block((Conv(3), Conv(1)), 8),))
  assert pixel1.segments(tower) == []
  assert pixel1.num_features(tower) == 1
  np.testing.assert_array_equal(pixel1.features(tower), [1.0])


def test_only_conv_towers_have_features():
  with pytest.raises(TypeError, match='^the Pixel-1 model needs a ConvTower '
                     'spec, got Block$'):
    pixel1.segments(_small_tower(8).blocks[0])


def test_missing_nested_mask_names_its_path():
  tower = _small_tower(schema.OneOf((8, 16), schema.FILTERS))
  filters_only = schema.map_oneofs(
      lambda path, o: (o if path != 'blocks/0/filters' else
                       schema.OneOf(o.choices, o.tag, mask=np.eye(2)[0])),
      tower)
  with pytest.raises(ValueError, match=re.escape(
      "OneOf 'blocks/0/layers/0/kernel_size' has no mask")):
    pixel1.features(filters_only)
  # A decision nested in a choice of another.
  nested = ConvTower((Block((schema.OneOf(
      (Conv(schema.OneOf((3, 5), schema.OP)), Zero()), schema.OP,
      mask=np.eye(2)[0]),), 8),))
  with pytest.raises(ValueError, match=re.escape(
      "OneOf 'blocks/0/layers/0/choices/0/kernel_size' has no mask")):
    pixel1.features(nested)


def test_unknown_space_lists_every_model():
  spec = search_spaces.get('proxylessnas_search').spec()
  with pytest.raises(ValueError) as error:
    MODEL.cost(spec, search_spaces.get('proxylessnas_mobile').default_indices(),
               cost_models.CostContext('nope'))
  assert str(error.value) == (
      "no Pixel-1 latency model for search space 'nope'; valid: "
      'mobilenet_v3_like_search, proxylessnas_enlarged_search, '
      'proxylessnas_search')
