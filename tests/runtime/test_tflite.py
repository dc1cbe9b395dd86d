"""A network as a TFLite model: converted, run and timed on this CPU.

tests/standalone/test_export.py checks an exported model's outputs against
its checkpointed network.
"""

import math

import numpy as np
import pytest

from tests.e2e import tiny
from tunas_search.runtime import tflite
from tunas_search.space import architecture

SPEC = tiny.tiny_spec()


def test_a_random_network_runs_on_a_batch():
  masked = architecture.with_indices(SPEC, architecture.largest(SPEC))
  model = tflite.random_tflite_model(masked, 28, 1, 10)
  images = np.random.default_rng(0).standard_normal([3, 28, 28, 1])
  outputs = tflite.run_tflite(model, images)
  assert outputs['logits'].shape == outputs['probabilities'].shape == (3, 10)
  np.testing.assert_allclose(outputs['probabilities'].sum(axis=1), 1.0,
                             rtol=1e-5)


def test_tflite_latency_of_a_random_network():
  masked = architecture.with_indices(SPEC, architecture.largest(SPEC))
  model = tflite.random_tflite_model(masked, 28, 1, 10)
  latency = tflite.measure_tflite_latency(model, runs=5, warmup_runs=1)
  assert latency.runs == 5 and latency.num_threads == 1
  # How long a run takes depends on the machine and its load: assert only
  # what holds on every machine (no time limit).
  assert math.isfinite(latency.median_ms)
  assert 0 <= latency.min_ms <= latency.median_ms
  with pytest.raises(ValueError, match='need runs >= 1'):
    tflite.measure_tflite_latency(model, runs=0)
  # The reported numbers, on a fake clock: runs of 5, 1, 3, 100 and 2 ms
  # (untimed warm-up runs read no clock).
  ticks = iter(np.cumsum([0, 5, 10, 1, 10, 3, 10, 100, 10, 2]) / 1000)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(tflite.time, 'perf_counter', lambda: next(ticks))
    latency = tflite.measure_tflite_latency(model, runs=5, warmup_runs=2)
  assert (latency.median_ms, latency.min_ms) == (pytest.approx(3.0),
                                                 pytest.approx(1.0))


@pytest.mark.parametrize('quantize', ['int8', 'dynamic', 'float16'])
def test_a_quantized_random_network_runs(quantize):
  masked = architecture.with_indices(SPEC, architecture.largest(SPEC))
  model = tflite.random_tflite_model(masked, 28, 1, 10, quantize=quantize)
  edges = tflite.edge_quantization(model)
  # Float32 at the edges by default, whatever is inside.
  assert edges['inputs']['images'] == {'dtype': 'float32', 'scale': 0.0,
                                       'zero_point': 0}
  images = np.random.default_rng(0).standard_normal([2, 28, 28, 1])
  outputs = tflite.run_tflite(model, images)
  assert outputs['logits'].shape == (2, 10)
  assert tflite.measure_tflite_latency(model, runs=2).runs == 2


def test_quantize_and_dequantize_values():
  detail = {'dtype': np.int8, 'quantization': (0.5, -3)}
  # round(x / 0.5) - 3, saturated to [-128, 127].
  q = tflite.quantize_values(np.array([0.0, 1.2, -1.3, 100.0, -100.0]),
                             detail)
  assert q.dtype == np.int8
  assert q.tolist() == [-3, -1, -6, 127, -128]
  np.testing.assert_array_equal(tflite.dequantize_values(q, detail),
                                [0.0, 1.0, -1.5, 65.0, -62.5])
  floats = {'dtype': np.float32, 'quantization': (0.0, 0)}
  assert tflite.quantize_values(np.array([1.5]), floats).dtype == np.float32


def test_bad_quantization_arguments():
  with pytest.raises(ValueError, match="unknown quantize 'int4'"):
    tflite.saved_model_to_tflite('/unused', 'int4')
  with pytest.raises(ValueError, match='needed by, and only by, '
                     'quantize=int8'):
    tflite.saved_model_to_tflite('/unused', 'int8')
  with pytest.raises(ValueError, match='int8 input/output needs'):
    tflite.saved_model_to_tflite('/unused', 'dynamic', int8_io=True)
