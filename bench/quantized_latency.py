#!/usr/bin/env python3
"""Float vs int8 TFLite: single-thread latency, and int8's top-1 drop; JSON.

  .venv/bin/python bench/quantized_latency.py [--network=NAME ...]
      [--image_size=224] [--rounds=5] [--runs=10] [--train_steps=300]

Latency: each network is built with random weights at --image_size (3
channels, 1000 classes), converted to a float TFLite model and to a
full-integer int8 one (float32 input/output, as `bin/export_model.py
--quantize=int8` writes by default; activation ranges from 8 seeded random
images), and both are timed with one interpreter thread on this CPU,
alternating: --rounds rounds of --runs timed runs each (after warm-up), so
that load on a shared machine touches both alike. Kept per model: the
fastest run and the median of the rounds' medians.

Accuracy at small scale: each network is trained for --train_steps steps on
the embedded Fashion-MNIST subset at --small_image_size (1 channel, 10
classes, batch 32, the stand-alone recipe) and exported with
`--quantize=int8`; its float and int8 top-1 on the 2,000 test images (batch
1 through the interpreter) and their top-1 agreement come from
export_info.json. --train_steps=0 skips it.

Top-level keys: benchmark ('quantized_latency'), cores, tensorflow,
image_size, threads (1), rounds, runs, small_image_size, train_steps, and
networks: network -> {
  float_ms, int8_ms: median of the rounds' median runs;
  float_min_ms, int8_min_ms: the fastest run;
  int8_speedup: float_ms / int8_ms (and int8_min_speedup, of the minima);
  float_bytes, int8_bytes: the models' sizes;
  convert_s: seconds to convert (float, int8);
  small: {float_top1, int8_top1, top1_drop_points, top1_agreement,
          train_s, export_s} (with --train_steps > 0)}.
`searched` (the network proxylessnas_mobile by default) is a searched
architecture: ProxylessNAS's mobile network, a point of
`proxylessnas_search`.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bin import _quiet  # pylint: disable=unused-import
import numpy as np
import tensorflow as tf

import search_spaces
from tunas_search.config.export import ExportOptions
from tunas_search.config.standalone import TrainEvalConfig
from tunas_search.runtime import tflite
from tunas_search.space import architecture
from tunas_search.standalone import export
from tunas_search.standalone import train_eval
# pylint: enable=g-import-not-at-top,wrong-import-position

NETWORKS = ('mobilenet_v2', 'mobilenet_v3_large', 'mobilenet_v4_conv_small',
            'proxylessnas_mobile')
WARMUP_RUNS = 3


def _model(name: str, image_size: int, quantize: str):
  space = search_spaces.get(name)
  masked = architecture.with_indices(space.spec(), space.default_indices())
  began = time.time()
  model = tflite.random_tflite_model(masked, image_size, 3, 1000,
                                     quantize=quantize)
  return model, time.time() - began


def latency(name: str, image_size: int, rounds: int, runs: int):
  """Times the float and int8 models of `name`, alternating."""
  models, convert_s = {}, {}
  for precision, quantize in (('float', 'none'), ('int8', 'int8')):
    models[precision], convert_s[precision] = _model(name, image_size,
                                                     quantize)
  timers = {p: tflite.tflite_timer(m, num_threads=1)
            for p, m in models.items()}
  for timer in timers.values():
    timer(1, WARMUP_RUNS)
  medians = {p: [] for p in timers}
  minima = {p: [] for p in timers}
  for _ in range(rounds):
    for precision, timer in timers.items():
      timing = timer(runs, 1)
      medians[precision].append(timing.median_ms)
      minima[precision].append(timing.min_ms)
  out = {}
  for precision in timers:
    out[f'{precision}_ms'] = statistics.median(medians[precision])
    out[f'{precision}_min_ms'] = min(minima[precision])
    out[f'{precision}_bytes'] = len(models[precision])
  out['int8_speedup'] = out['float_ms'] / out['int8_ms']
  out['int8_min_speedup'] = out['float_min_ms'] / out['int8_min_ms']
  out['convert_s'] = {p: round(s, 1) for p, s in convert_s.items()}
  return out


def small_scale(name: str, image_size: int, train_steps: int, workdir: str):
  """Trains `name` briefly on the embedded data; float vs int8 accuracy."""
  space = search_spaces.get(name)
  config = TrainEvalConfig(
      search_space=name,
      indices=architecture.format_indices(space.default_indices()),
      model_dir=os.path.join(workdir, name), num_classes=10,
      num_train_examples=10000, image_size=image_size, input_channels=1,
      train_batch_size=32, max_steps=train_steps, seed=1, mode='train',
      save_checkpoints_steps=train_steps)
  began = time.time()
  train_eval.run(config, space.spec())
  train_s = time.time() - began
  began = time.time()
  result = export.export_run(config.model_dir,
                             options=ExportOptions(quantize='int8'))
  accuracy = result.accuracy
  return {'float_top1': accuracy['float32']['top1'],
          'int8_top1': accuracy['int8']['top1'],
          'top1_drop_points': accuracy['int8']['top1_drop_points'],
          'top1_agreement': accuracy['int8']['top1_agreement'],
          'test_images': accuracy['images'],
          'train_s': round(train_s, 1),
          'export_s': round(time.time() - began, 1)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--network', action='append', default=None,
                      help='Registry name (repeatable; default: '
                      f'{", ".join(NETWORKS)}).')
  parser.add_argument('--image_size', type=int, default=224)
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--runs', type=int, default=10)
  parser.add_argument('--small_image_size', type=int, default=32)
  parser.add_argument('--train_steps', type=int, default=300)
  args = parser.parse_args()
  networks = args.network or list(NETWORKS)
  results = {}
  with tempfile.TemporaryDirectory() as workdir:
    for name in networks:
      print(f'{name}: latency', file=sys.stderr, flush=True)
      results[name] = latency(name, args.image_size, args.rounds, args.runs)
      if args.train_steps:
        print(f'{name}: training {args.train_steps} steps', file=sys.stderr,
              flush=True)
        results[name]['small'] = small_scale(
            name, args.small_image_size, args.train_steps, workdir)
  print(json.dumps({
      'benchmark': 'quantized_latency', 'cores': os.cpu_count(),
      'tensorflow': tf.__version__, 'numpy': np.__version__,
      'image_size': args.image_size, 'threads': 1, 'rounds': args.rounds,
      'runs': args.runs, 'small_image_size': args.small_image_size,
      'train_steps': args.train_steps, 'networks': results}, indent=1))


if __name__ == '__main__':
  main()
