#!/usr/bin/env python3
"""Measures latencies on your device and fits a latency model for a search.

  python bin/calibrate_latency.py --search_space=proxylessnas_search \\
      --output_dir=/tmp/calibration --num_samples=200 --image_size=224 \\
      --threads=1 [--quantize=int8]

Samples architectures across the space's cost range, builds each with random
weights, converts it to a float TFLite model (or, with --quantize=int8, a
full-integer one, as bin/export_model.py --quantize=int8 ships it) and
times it (median of --runs after --warmup_runs, and the fastest): on this
machine's CPU (`--backend=tflite_cpu`) or on an Android device through adb
(`--backend=adb --benchmark_binary=PATH [--device_serial=SERIAL]`,
TensorFlow Lite's benchmark_model, given the model file as it is). Each
measurement is appended to OUTPUT_DIR/measurements.jsonl as it is taken: an
interrupted calibration resumes where it stopped, and a rerun with a larger
--num_samples measures only the new architectures. Then fits the model on
4/5 of them (the fastest run of each by default, --statistic), reports
its error on the held-out 1/5 and writes
OUTPUT_DIR/latency_model.json (and predicted_vs_measured.png). Search with
it: `bin/search.py --cost_model=measured
--cost_model_file=OUTPUT_DIR/latency_model.json --rl_cost_model_target=MS`
(an int8 latency model makes that a search against int8 latency; the
latency model records its precision, which search_result.json and
analyze_search name).
"""

import os
import sys

if __package__ in (None, ''):
  # Run as a file: the tools are package `bin` of the source tree.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  __package__ = 'bin'  # pylint: disable=redefined-builtin

# pylint: disable=g-import-not-at-top,wrong-import-position
# First, before anything imports TensorFlow: keeps its start-up quiet.
from . import _quiet  # pylint: disable=unused-import
from absl import flags
from absl import logging

from . import cli
from . import config_flags
from . import resolve
import search_spaces
from tunas_search.cost_models import calibration
from tunas_search.config import ConfigError
# pylint: enable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
CONFIG_FLAGS = config_flags.ConfigFlags(calibration.CalibrationConfig, ())


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  CONFIG_FLAGS.define(flag_values)


def build_config(f: flags.FlagValues = FLAGS
                 ) -> calibration.CalibrationConfig:
  """Validates the flags into a CalibrationConfig (one-line errors)."""
  values = CONFIG_FLAGS.values(f)
  # Any search space, a plug-in's or MODULE:FUNCTION included.
  space = resolve.search_space(values['search_space'], searchable=True,
                               image_size=values['image_size'])
  if space.scored_as != space.name:
    raise cli.UsageError(
        f'{space.name} is scored with the latency model of '
        f'{space.scored_as}, which holds all its architectures: calibrate '
        f'--search_space={space.scored_as}')
  if not values['output_dir']:
    raise cli.UsageError('--output_dir is required')
  cli.check_output_dir('output_dir', values['output_dir'])
  try:
    return calibration.CalibrationConfig(**values)
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None


def main(argv, flag_values: flags.FlagValues = FLAGS):
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = build_config(flag_values)
  spec = search_spaces.get(config.search_space).spec()
  try:
    measurements = calibration.calibrate(config, spec)
    device = calibration.describe_device(config)
    result = calibration.fit(config, spec, measurements, device)
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None
  path = calibration.write_model(config.output_dir, result)
  report = result.model.heldout
  plot = calibration.plot(
      config.output_dir, result,
      f'{config.search_space} {config.image_size}px, '
      f'{calibration.PRECISIONS[config.quantize]}, {config.threads} '
      f'thread(s), {config.statistic}: MAPE {report["mape_percent"]:.1f}%')
  from tunas_search.runtime import progress  # pylint: disable=g-import-not-at-top
  total = sum(m.seconds for m in measurements)
  logging.info('%d measurements took %s of measuring in all',
               len(measurements), progress.format_seconds(total))
  print(calibration.format_report(report, config.statistic))
  print(f'latency model: {path}' + (f'\nplot: {plot}' if plot else ''))


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
