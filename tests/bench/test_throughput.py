"""Tests of bench/throughput.py: its arithmetic, the GPU sampler's parsing
and windows, placement counts, bad flags, and one tiny run end to end.

Timings are measured by running the benchmark, never in a test: the run
here checks the JSON's keys and that its rates are its timings' arithmetic.
"""

import json
import os
import subprocess
import sys

import pytest
from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2

from tests import files

SCRIPT = os.path.join(files.ROOT, 'bench', 'throughput.py')
TINY = 'examples.my_spaces:tiny'


@pytest.fixture(scope='module')
def throughput():
  return files.load_script('bench', 'throughput.py')


def test_variants_parse_in_the_order_given(throughput):
  assert [v.name for v in throughput.parse_variants(
      'xla:bfloat16, graph:float32')] == ['xla:bfloat16', 'graph:float32']


@pytest.mark.parametrize('text, match', [
    ('graph', r"unknown --variants entry 'graph'; valid: BUILD:DTYPE with "
     r'BUILD one of graph, xla and DTYPE one of float32, bfloat16'),
    ('jit:float32', "unknown --variants entry 'jit:float32'"),
    ('graph:float16', "unknown --variants entry 'graph:float16'"),
    ('', "unknown --variants entry ''"),
    ('xla:float32,xla:float32', "names 'xla:float32' twice"),
])
def test_bad_variants_are_refused_naming_the_choices(throughput, text, match):
  with pytest.raises(ValueError, match=match):
    throughput.parse_variants(text)


def test_rates_are_images_per_second_of_each_side(throughput):
  # Batch 128 (validation 512): search 100 ms, train 40 ms, validation 40.
  out = throughput.rates({'search': 100.0, 'train': 40.0,
                          'validation': 40.0}, 128, 512)
  assert out == {
      'search_images_per_s': 1280.0, 'train_images_per_s': 3200.0,
      'validation_images_per_s': 12800.0, 'parts_images_per_s': 1600.0,
      'search_vs_parts_ratio': 1.25,
      'search_vs_goal': round(1280 / 2600, 3),
      # 90 epochs x 1,231,121 images at 1,280 images/s.
      'imagenet_search_hours': round(90 * 1231121 / 1280 / 3600, 1)}
  assert out['imagenet_search_hours'] == 24.0


def test_samples_parse_and_average_inside_their_windows(throughput):
  assert throughput.parse_sample('93, 40213\n') == (93.0, 40213.0)
  for line in ('', '[N/A], 3', 'No devices were found'):
    assert throughput.parse_sample(line) is None
  samples = [(0.5, 10.0, 1.0), (1.5, 90.0, 2.0), (2.5, 70.0, 3.0),
             (3.5, 20.0, 4.0)]
  assert throughput.mean_utilisation(samples, [(1.0, 3.0)]) == 80.0
  assert throughput.mean_utilisation(samples, [(0.0, 1.0), (3.0, 4.0)]) == 15
  assert throughput.mean_utilisation(samples, [(5.0, 6.0)]) is None


def test_the_sampler_reads_what_its_command_prints(throughput):
  # A stand-in for nvidia-smi that prints two samples and a header.
  command = [sys.executable, '-c',
             "print('utilization.gpu, memory.used'); print('50, 100'); "
             "print('70, 300')"]
  sampler = throughput.GpuSampler(command)
  sampler.stop(grace_s=60)  # It ends by itself: all its lines are read.
  assert [s[1:] for s in sampler.samples] == [(50.0, 100.0), (70.0, 300.0)]
  assert sampler.samples[0][0] <= sampler.samples[1][0]
  assert throughput.nvidia_smi_command(100)[-1] == '--loop-ms=100'


def test_placement_counts_ops_by_device_and_network_ops_off_the_gpu(
    throughput):
  meta = config_pb2.RunMetadata()
  graph = graph_pb2.GraphDef()
  for name, op, device in (
      ('a', 'Conv2D', '/job:localhost/replica:0/task:0/device:GPU:0'),
      ('b', 'DepthwiseConv2dNative', '/job:localhost/replica:0/task:0/'
       'device:CPU:0'),
      ('c', 'Add', '/job:localhost/replica:0/task:0/device:CPU:0')):
    graph.node.add(name=name, op=op, device=device)
  meta.partition_graphs.append(graph)
  assert throughput.placement(meta, has_gpu=True) == {
      'ops_by_device': {'gpu': 1, 'cpu': 2},
      'network_ops_on_cpu': {'DepthwiseConv2dNative': 1}}
  # Without a GPU every op is on a CPU, and none is out of place.
  assert throughput.placement(meta, has_gpu=False)['network_ops_on_cpu'] == {}


@pytest.mark.parametrize('flags, message', [
    (['--variants=graph:fp16'], "unknown --variants entry 'graph:fp16'"),
    (['--steps=0'], '--steps must be >= 1, got 0'),
    (['--image_size=8'], 'image_size 8 is outside the valid range'),
    (['--search_space=nope'], "unknown search space 'nope'"),
])
def test_bad_flags_are_one_line_and_exit_2(throughput, capsys, flags,
                                           message):
  with pytest.raises(SystemExit) as exit_:
    throughput.parse_args(flags)
  assert exit_.value.code == 2
  last = capsys.readouterr().err.strip().splitlines()[-1]
  assert last.startswith('throughput.py: error: ') and message in last, last


def _tiny_run(variants: str) -> dict:
  result = subprocess.run(
      [sys.executable, SCRIPT, f'--search_space={TINY}', '--image_size=32',
       '--batch_size=2', '--steps=1', '--repeats=1',
       f'--variants={variants}'],
      capture_output=True, text=True, check=False, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout)


def _check_variant(out: dict, name: str, build: str, dtype: str):
  variant = out['variants'][name]
  assert variant['plan'].startswith(f'step plan: {build} build')
  assert variant['plan'].endswith(dtype)
  ms = {side: variant[f'{side}_ms'] for side in ('search', 'train',
                                                 'validation')}
  assert all(v > 0 for v in ms.values())
  # The rates are the timings' arithmetic (ms rounded to 0.01 in the JSON).
  assert variant['search_images_per_s'] == pytest.approx(
      2000 / ms['search'], rel=1e-2)
  assert variant['search_vs_parts_ratio'] == pytest.approx(
      ms['search'] / (ms['train'] + ms['validation']), rel=1e-2)
  assert variant['gpu_utilisation'] is None  # No GPU here.
  for side in ('search', 'train', 'validation'):
    assert variant['placement'][side]['network_ops_on_cpu'] == {}
    assert variant['first_run_s'][side] > 0


def test_a_tiny_run_on_the_cpu():
  out = _tiny_run('graph:bfloat16')
  assert (out['benchmark'], out['device'], out['train_batch_size'],
          out['validation_batch_size']) == ('throughput', 'cpu', 2, 8)
  assert out['gpu_memory_used_mib_max'] is None
  _check_variant(out, 'graph:bfloat16', 'graph', 'bfloat16')


@pytest.mark.slow
def test_a_tiny_run_compiled_by_xla():
  out = _tiny_run('xla:float32')
  _check_variant(out, 'xla:float32', 'XLA', 'float32')
