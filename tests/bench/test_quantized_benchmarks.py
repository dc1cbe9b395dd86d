"""bench/quantized_latency.py and bench/quantized_op_costs.py: what they
build and report. Their timings are measured by running them, never here."""

import pytest

from tests import files
from tunas_search.space import schema
from tunas_search.space.specs import DepthwiseBottleneck, FilterMultiplier


@pytest.fixture(scope='module')
def latency_bench():
  return files.load_script('bench', 'quantized_latency.py')


@pytest.fixture(scope='module')
def op_costs():
  return files.load_script('bench', 'quantized_op_costs.py')


def test_the_issue_networks_are_registry_names(latency_bench):
  import search_spaces  # pylint: disable=g-import-not-at-top
  assert set(latency_bench.NETWORKS) <= set(search_spaces.names())


def test_latency_of_float_and_int8_models(latency_bench):
  result = latency_bench.latency('proxylessnas_mobile', 32, rounds=1, runs=1)
  assert set(result) >= {'float_ms', 'int8_ms', 'float_min_ms',
                         'int8_min_ms', 'int8_speedup', 'float_bytes',
                         'int8_bytes'}
  assert result['int8_speedup'] == result['float_ms'] / result['int8_ms']
  # Weights are most of either file: 1 byte each in int8 against 4.
  assert result['int8_bytes'] < 0.4 * result['float_bytes']


def test_op_cost_forms_differ_in_one_operation(op_costs):
  base = op_costs.network(3)
  assert not schema.decisions(base)  # Fixed networks: nothing to choose.
  varied = {form: op_costs.network(3, **changes)
            for form, changes in op_costs.FORMS.items()}
  expected = {'se': ('use_squeeze_and_excite', True),
              'hard_swish': ('activation', 'swish6'),
              'k7': ('kernel_size', 7),
              'e6': ('expansion_filters', FilterMultiplier(6.0))}
  for form, (field, value) in expected.items():
    layers = [r.layer for r in varied[form].blocks[1].layers[1:]]
    assert len(layers) == 3
    for layer in layers:
      assert isinstance(layer, DepthwiseBottleneck)
      assert getattr(layer, field) == value
    # Everything else as in the base.
    assert varied[form].blocks[0] == base.blocks[0]
    assert varied[form].blocks[1].layers[0] == base.blocks[1].layers[0]
