"""Tests for the search-space registry: sizes, decision counts, references."""

import pytest

import search_spaces
from tunas_search.space import architecture
from tunas_search import registry
from tunas_search.space import schema


@pytest.mark.parametrize('name, decisions, log10_size', [
    # docs/method.md section 3: ~10^21, ~10^28, ~10^43; docs/cost_models.md
    ('proxylessnas_search', 73, 21.3),
    ('proxylessnas_enlarged_search', 73, 28.1),
    ('mobilenet_v3_like_search', 86, 42.9),
])
def test_space_sizes(name, decisions, log10_size):
  spec = search_spaces.get(name).spec()
  assert len(schema.decisions(spec)) == decisions
  assert schema.log10_space_size(spec) == pytest.approx(log10_size, abs=0.05)


def test_paths_match_the_published_index_tables():
  # docs/cost_models.md, spot checks.
  pl = schema.decisions(search_spaces.get('proxylessnas_search').spec())
  assert pl[8].path == 'blocks/2/layers/1/layer'
  assert pl[68].path == 'blocks/7/layers/0/choices/0/kernel_size'
  assert pl[72].path == 'blocks/8/filters'
  v3 = schema.decisions(search_spaces.get('mobilenet_v3_like_search').spec())
  assert v3[2].path == 'blocks/0/layers/2/layer'
  assert v3[6].path == 'blocks/1/layers/0/use_squeeze_and_excite'
  assert v3[83].path == 'blocks/5/filters'
  assert v3[85].oneof.choices == (512, 640, 768, 1024, 1280, 1536, 2048)


def test_enlarged_width_choices():
  # docs/cost_models.md
  d = schema.decisions(
      search_spaces.get('proxylessnas_enlarged_search').spec())
  assert d[28].oneof.choices == (16, 24, 32, 40, 48, 64)
  assert d[0].oneof.choices == (8, 16, 24, 32)


@pytest.mark.parametrize('name', search_spaces.reference_names())
def test_reference_nets_are_valid_architectures(name):
  space = search_spaces.get(name)
  architecture.validate(space.spec(), space.default_indices())


def test_mobilenet_v3_large_has_exactly_one_architecture():
  spec = search_spaces.get('mobilenet_v3_large').spec()
  assert schema.log10_space_size(spec) == 0.0


def test_unknown_name_lists_valid_choices():
  with pytest.raises(registry.UnknownNameError,
                     match="unknown search space 'nasnet'; valid choices: "
                           "mnasnet_b1, mobilenet_v2"):
    search_spaces.get('nasnet')


def test_registry_partitions_spaces_and_references():
  assert search_spaces.search_space_names() == [
      'mobilenet_v3_like_search', 'mobilenet_v4_conv_small_coarse',
      'mobilenet_v4_conv_small_fine', 'mobilenet_v4_conv_small_search',
      'proxylessnas_enlarged_search', 'proxylessnas_search']
  assert set(search_spaces.reference_names()) == {
      'mnasnet_b1', 'mobilenet_v2', 'mobilenet_v3_large', 'proxylessnas_mobile',
      'mobilenet_v4_conv_small', 'mobilenet_v4_conv_medium',
      'mobilenet_v4_conv_large'}


def test_bfloat16_by_default_only_for_mobilenet_v3_like_search():
  # docs/method.md section 2: the original's use_bfloat16=auto.
  assert search_spaces.bfloat16_names() == ['mobilenet_v3_like_search']
  assert search_spaces.default_use_bfloat16('mobilenet_v3_like_search')
  assert not search_spaces.default_use_bfloat16('proxylessnas_search')
  assert not search_spaces.default_use_bfloat16('tiny')  # Not registered.
