#!/usr/bin/env python3
"""What one operation costs in float and in int8 TFLite, on this CPU; JSON.

  .venv/bin/python bench/quantized_op_costs.py [--image_size=224]
      [--runs=20] [--rounds=3]

A small network (stem conv3x3 s2 16, relu; one inverted bottleneck s2 to 40
channels; then --layers residual inverted bottlenecks at 40 channels, the
varied ones) is timed with random weights through the latency calibration's
measurement (`cost_models.calibration.measure`: the float or full-integer
int8 TFLite model that `calibrate_latency --quantize` times, one thread,
the reference network's disturbance check and retakes) in a base form (k3,
expansion 3, relu, no squeeze-excite) and in one variant per operation:
`se` (squeeze-excite on), `hard_swish` (swish6 instead of relu), `k7`
(7x7 depthwise), `e6` (expansion 6). Each round times every form in float
and in int8, alternating; kept is each timing's fastest run, the minimum
over rounds.

Keys: benchmark, image_size, layers, runs, rounds, and forms: form ->
{float_ms, int8_ms, int8_over_float}; shifts: op -> {float_ms, int8_ms
(what the variant adds to the base), int8_over_float (int8's shift over
float's: below 1 the op gains from int8 as a whole network does,
`base_int8_over_float`; above it, it gains less)}, and base_int8_over_float.
"""

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bin import _quiet  # pylint: disable=unused-import
from tunas_search.cost_models import calibration
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      Residual)
# pylint: enable=g-import-not-at-top,wrong-import-position

FORMS = {
    'base': {},
    'se': {'use_squeeze_and_excite': True},
    'hard_swish': {'activation': 'swish6'},
    'k7': {'kernel_size': 7},
    'e6': {'expansion_filters': FilterMultiplier(6.0)},
}


def network(layers: int, **varied) -> ConvTower:
  """The stem, a stride-2 bottleneck and `layers` varied residual ones."""
  body = dict(kernel_size=3, expansion_filters=FilterMultiplier(3.0))
  body.update(varied)
  return ConvTower((
      Block((Conv(3, strides=2), Activation('relu')), 16),
      Block((DepthwiseBottleneck(3, FilterMultiplier(3.0), strides=2),)
            + tuple(Residual(DepthwiseBottleneck(**body))
                    for _ in range(layers)), 40)))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--image_size', type=int, default=224)
  parser.add_argument('--layers', type=int, default=3)
  parser.add_argument('--runs', type=int, default=20)
  parser.add_argument('--rounds', type=int, default=3)
  args = parser.parse_args()
  configs = {}
  with tempfile.TemporaryDirectory() as tmp:
    for quantize in ('none', 'int8'):
      configs[quantize] = calibration.CalibrationConfig(
          search_space='op_costs', output_dir=tmp, image_size=args.image_size,
          runs=args.runs, quantize=quantize)
  reference = calibration.tflite_reference(threads=1)
  fastest = {(form, q): float('inf') for form in FORMS for q in configs}
  for _ in range(args.rounds):
    for form, varied in FORMS.items():
      spec = network(args.layers, **varied)
      for quantize, config in configs.items():
        timing = calibration.measure(config, spec, [], reference)
        fastest[form, quantize] = min(fastest[form, quantize],
                                      timing['min_ms'])
  forms = {form: {'float_ms': fastest[form, 'none'],
                  'int8_ms': fastest[form, 'int8'],
                  'int8_over_float': fastest[form, 'int8']
                                     / fastest[form, 'none']}
           for form in FORMS}
  base = forms['base']
  shifts = {}
  for form in FORMS:
    if form != 'base':
      f = forms[form]['float_ms'] - base['float_ms']
      i = forms[form]['int8_ms'] - base['int8_ms']
      shifts[form] = {'float_ms': f, 'int8_ms': i,
                      'int8_over_float': i / f if f else None}
  print(json.dumps({
      'benchmark': 'quantized_op_costs', 'image_size': args.image_size,
      'layers': args.layers, 'runs': args.runs, 'rounds': args.rounds,
      'forms': forms, 'shifts': shifts,
      'base_int8_over_float': base['int8_over_float']}, indent=1))


if __name__ == '__main__':
  main()
