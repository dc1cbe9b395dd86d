#!/usr/bin/env python3
"""Describes one architecture: block string, size, multiply-adds and costs.

  python bin/describe_arch.py --search_space=mobilenet_v2
  python bin/describe_arch.py --search_space=proxylessnas_search \\
      --indices=0:0:0:1:0:... --format=json

Without --indices, a reference net describes itself and a search space its
largest network. Runs on numpy only (no TensorFlow graph), so it is fast;
only --measure_latency builds the network in TensorFlow, converts it to a
TFLite model (float, or --quantize=int8 for a full-integer one, as
bin/export_model.py --quantize=int8 ships it) and times it on this
machine's CPU.
"""

import json
import os
import sys
from typing import Any, Dict, Optional

if __package__ in (None, ''):
  # Run as a file (python bin/search.py): the tools are package `bin` of the
  # source tree. Installed, they are package `tunas_search_cli`.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  __package__ = 'bin'  # pylint: disable=redefined-builtin

# pylint: disable=g-import-not-at-top,wrong-import-position
# First, before anything imports TensorFlow: keeps its start-up quiet.
from . import _quiet  # pylint: disable=unused-import
from absl import flags

import search_spaces
from . import cli
from . import resolve
from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search import cost_models
from tunas_search.config.export import PRECISIONS
from tunas_search.config.export import QUANTIZE_MODES
from tunas_search.space import schema

FORMATS = ('text', 'json')
# TuNAS's input side: describe_arch's default but for spaces published at
# another (`SearchSpace.image_size`).
DEFAULT_SIZE = 224


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines this tool's flags.

  Called by `run()` rather than at import, so that importing this module
  (tests, other tools) never collides with other bin/ tools' flags of the
  same name (--search_space, --format, ...) in one process.
  """
  flags.DEFINE_string('search_space', None, resolve.space_help(
      'A search space or reference net'), flag_values=flag_values)
  flags.DEFINE_string('indices', None, 'Architecture string a:b:c:... '
                      '(default: the reference net, or the largest network '
                      'of a space).', flag_values=flag_values)
  flags.DEFINE_integer('num_classes', 1000, 'Classifier outputs.',
                       lower_bound=1, flag_values=flag_values)
  flags.DEFINE_integer('image_size', None, 'Input height and width '
                       f'({config_lib.MIN_IMAGE_SIZE}..'
                       f'{config_lib.MAX_IMAGE_SIZE}; default: the published '
                       'one of a MobileNetV4 net or space, else 224).',
                       flag_values=flag_values)
  flags.DEFINE_integer('input_channels', 3, 'Input channels.', lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_string('format', 'text', 'Output format: ' +
                      ', '.join(FORMATS), flag_values=flag_values)
  flags.DEFINE_string('cost_model_file', None, 'A latency model of '
                      'bin/calibrate_latency.py: also report its estimate '
                      '(cost/measured).', flag_values=flag_values)
  flags.DEFINE_bool('measure_latency', False, 'Also build the network (random '
                    'weights), convert it to a float TFLite model and report '
                    'its median latency on this CPU (1 thread).',
                    flag_values=flag_values)
  flags.DEFINE_enum('quantize', 'none', list(QUANTIZE_MODES),
                    '--measure_latency: time the model quantized so (int8: '
                    'full integer, float32 input/output).',
                    flag_values=flag_values)
  flags.DEFINE_integer('latency_runs', 20, 'Timed runs of --measure_latency '
                       '(after 3 warm-up runs).', lower_bound=1,
                       flag_values=flag_values)


def describe(space_name: str, indices: Optional[str] = None,
             num_classes: int = 1000, image_size: Optional[int] = None,
             input_channels: int = 3,
             cost_model_file: Optional[str] = None) -> Dict[str, Any]:
  """Everything describe_arch reports about one architecture.

  Args:
    space_name: a name from `search_spaces.names()`.
    indices: architecture string, or None for the default architecture.
    num_classes: classifier outputs.
    image_size: input resolution; None: the space's published one
      (`SearchSpace.image_size`), else 224.
    input_channels: input channels.
    cost_model_file: a latency model file for the `measured` cost model.

  Returns:
    A JSON-serialisable dict: search_space, architecture (the architecture
    string), indices (its list of ints), block_string, image_size, params,
    madds,
    num_decisions, log10_space_size and `cost/<name>` for every applicable
    cost model, plus latency_model_precision (float32 or int8: what
    cost/measured estimates) with a cost model file. `architecture` and
    `indices` mean what they mean in analyze_search's JSON.

  Raises:
    cli.UsageError: unknown space, indices that do not fit it, or an image
      size outside the configs' range (`resolve.check_image_size`).
  """
  if image_size is None:
    image_size = resolve.search_space(space_name).image_size or DEFAULT_SIZE
  space = resolve.search_space(space_name, image_size=image_size)
  spec = space.spec()
  try:
    chosen = (architecture.parse_indices(indices, spec) if indices is not None
              else list(space.default_indices()))
  except architecture.ArchitectureError as e:
    raise cli.UsageError(f'--indices: {e}') from None
  # A reference net is scored as a point of the space it lives in.
  context = cost_models.CostContext(
      space.scored_as, image_size=image_size,
      num_classes=num_classes, input_channels=input_channels,
      cost_model_file=cost_model_file)
  if cost_model_file:
    try:
      cost_models.check_file('measured', context)
    except cost_models.LatencyModelError as e:
      raise cli.UsageError(str(e)) from None
  costs = {f'cost/{name}': float(cost_models.get(name).cost(spec, chosen,
                                                              context))
           for name in cost_models.applicable(context.space_name, spec,
                                              cost_model_file)}
  block_string = getattr(architecture, 'block_string', None)
  precision = {}
  if cost_model_file:
    # What cost/measured estimates: float32 or int8 models' latency.
    precision['latency_model_precision'] = cost_models.measured.load(
        cost_model_file).precision
  return {
      'search_space': space.name,
      'architecture': architecture.format_indices(chosen),
      'indices': [int(i) for i in chosen],
      'block_string': (block_string(architecture.prune(spec, chosen))
                       if block_string else None),
      'image_size': image_size,
      'params': int(round(costs['cost/params'])),
      'madds': int(round(costs['cost/madds'])),
      'num_decisions': len(schema.decisions(spec)),
      'log10_space_size': schema.log10_space_size(spec),
      **costs,
      **precision,
  }


MEASURED_KEY = 'measured_latency_ms/tflite_cpu'
MEASURED_MIN_KEY = 'measured_latency_min_ms/tflite_cpu'
MEASURED_PRECISION_KEY = 'measured_precision'
WARMUP_RUNS = 3


def measure_latency(space_name: str, indices: str, num_classes: int = 1000,
                    image_size: int = 224, input_channels: int = 3,
                    runs: int = 20, quantize: str = 'none'
                    ) -> Dict[str, Any]:
  """Median and minimum TFLite latency on this CPU, one thread.

  Imports TensorFlow (only this option of the tool needs it).

  Args:
    quantize: how the model is converted (`QUANTIZE_MODES`; 'none': float).

  Returns:
    {MEASURED_KEY: median ms, MEASURED_MIN_KEY: minimum ms,
    MEASURED_PRECISION_KEY: 'float32', 'int8', ...}.
  """
  # pylint: disable=g-import-not-at-top
  from tunas_search.runtime import tflite
  # pylint: enable=g-import-not-at-top
  spec = search_spaces.get(space_name).spec()
  masked = architecture.with_indices(spec, architecture.parse_indices(
      indices, spec))
  model = tflite.random_tflite_model(masked, image_size, input_channels,
                                     num_classes, quantize=quantize)
  latency = tflite.measure_tflite_latency(model, runs=runs,
                                          warmup_runs=WARMUP_RUNS)
  return {MEASURED_KEY: latency.median_ms, MEASURED_MIN_KEY: latency.min_ms,
          MEASURED_PRECISION_KEY: PRECISIONS[quantize]}


def format_text(info: Dict[str, Any]) -> str:
  """A readable multi-line summary of `describe()`'s result."""
  lines = [
      f'search space   {info["search_space"]}',
      f'architecture   {info["architecture"]}',
      f'block string   {info["block_string"]}',
      f'image size     {info["image_size"]}x{info["image_size"]}',
      f'decisions      {info["num_decisions"]} '
      f'(10^{info["log10_space_size"]:.1f} architectures)',
      f'params         {info["params"]:,} ({info["params"] / 1e6:.2f}M)',
      f'madds          {info["madds"]:,} ({info["madds"] / 1e6:.1f}M)',
  ]
  for key in sorted(k for k in info if k.startswith('cost/')):
    unit = cost_models.get(key[len('cost/'):]).unit
    lines.append(f'{key + ":":<22} {info[key]:,.2f} {unit}')
  if 'latency_model_precision' in info:
    lines.append(f'{"latency model:":<22} {info["latency_model_precision"]} '
                 '(what cost/measured estimates)')
  if MEASURED_KEY in info:
    lines.append(f'{"measured tflite cpu:":<22} {info[MEASURED_KEY]:,.2f} ms '
                 f'({info[MEASURED_PRECISION_KEY]}, median, 1 thread; min '
                 f'{info[MEASURED_MIN_KEY]:,.2f} ms)')
  return '\n'.join(lines)


def main(argv, flag_values: flags.FlagValues = flags.FLAGS):
  """Prints the description of the architecture chosen by the flags.

  Raises:
    cli.UsageError: on a bad flag value (printed as one line, exit code 2).
  """
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  f = flag_values
  if f.format not in FORMATS:
    raise cli.UsageError(f'unknown --format {f.format!r}; valid choices: '
                         f'{", ".join(FORMATS)}')
  if f.quantize != 'none' and not f.measure_latency:
    raise cli.UsageError(f'--quantize={f.quantize} quantizes the model '
                         '--measure_latency times; add --measure_latency')
  info = describe(f.search_space, f.indices, num_classes=f.num_classes,
                  image_size=f.image_size, input_channels=f.input_channels,
                  cost_model_file=f.cost_model_file)
  if f.measure_latency:
    info.update(measure_latency(
        info['search_space'], info['architecture'],
        num_classes=f.num_classes,
        image_size=info['image_size'], input_channels=f.input_channels,
        runs=f.latency_runs, quantize=f.quantize))
  print(json.dumps(info, indent=2) if f.format == 'json'
        else format_text(info))


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
