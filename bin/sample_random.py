#!/usr/bin/env python3
"""Samples uniformly random architectures inside a cost window.

The random-search baseline of the TuNAS paper (docs/method.md section 7):

  python bin/sample_random.py --search_space=proxylessnas_search \\
      --min_cost=83 --max_cost=85 --num_samples=5 --seed=0
  python bin/sample_random.py --cost_model=madds --max_cost=300e6 \\
      --format=json

Prints one architecture string per line (text) or a JSON list of
{architecture, block_string, cost}. The same --seed gives the same output.
Runs on numpy only (no TensorFlow graph).
"""

import json
import os
import sys

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

from . import cli
from . import resolve
from tunas_search import config as config_lib
from tunas_search import cost_models
from tunas_search.search import random_search

FORMATS = ('text', 'json')
FLAGS = flags.FLAGS

flags.DEFINE_string('search_space', 'proxylessnas_search', resolve.space_help(
    'Search space', reference_nets=False))
flags.DEFINE_string('cost_model', 'pixel1_latency',
                    'Cost model of the window: ' + ', '.join(
                        cost_models.names()) + " (default: the space's: "
                    'pixel1_latency for the TuNAS spaces, else madds)')
flags.DEFINE_string('cost_model_file', None, 'Latency model of '
                    '--cost_model=measured (bin/calibrate_latency.py).')
flags.DEFINE_float('min_cost', None, 'Lower end of the cost window, in the '
                   "cost model's unit (default: none).")
flags.DEFINE_float('max_cost', None, 'Upper end of the cost window '
                   '(default: none).')
flags.DEFINE_integer('num_samples', 1, 'Architectures to print.')
flags.DEFINE_integer('seed', None, 'Random seed, 0 or more (default: a '
                     'fresh one).')
flags.DEFINE_integer('max_attempts', random_search.DEFAULT_MAX_ATTEMPTS,
                     'Give up after drawing this many architectures.')
flags.DEFINE_integer('image_size', 224, 'Input height and width (madds; '
                     f'{config_lib.MIN_IMAGE_SIZE}..'
                     f'{config_lib.MAX_IMAGE_SIZE}).')
flags.DEFINE_integer('num_classes', 1000, 'Classifier outputs (madds, '
                     'params).', lower_bound=1)
flags.DEFINE_integer('input_channels', 3, 'Input channels.', lower_bound=1)
flags.DEFINE_string('format', 'text', 'Output format: ' + ', '.join(FORMATS))


def main(argv):
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if FLAGS.format not in FORMATS:
    raise cli.UsageError(f'unknown --format {FLAGS.format!r}; valid choices: '
                         f'{", ".join(FORMATS)}')
  space = resolve.search_space(FLAGS.search_space, searchable=True,
                               image_size=FLAGS.image_size)
  cost_model = (FLAGS.cost_model if FLAGS['cost_model'].present
                else space.cost_model)
  # A cost window needs a cost: no `none` here.
  resolve.check_cost_model(cost_model, space, allow_none=False)
  model = cli.get_or_usage(cost_models.get, cost_model)
  try:
    # The rules of a search's config, so that both tools take the same flags.
    config_lib.check_seed(FLAGS.seed)
    config_lib.check_cost_model_file(model.name, FLAGS.cost_model_file)
  except config_lib.ConfigError as e:
    raise cli.UsageError(str(e)) from None
  context = cost_models.CostContext(
      space.scored_as, image_size=FLAGS.image_size,
      num_classes=FLAGS.num_classes, input_channels=FLAGS.input_channels,
      cost_model_file=FLAGS.cost_model_file)
  try:
    cost_models.check_file(model.name, context)
  except cost_models.LatencyModelError as e:
    raise cli.UsageError(str(e)) from None
  try:
    samples = random_search.sample(
        space.spec(), model, context, num_samples=FLAGS.num_samples,
        min_cost=FLAGS.min_cost, max_cost=FLAGS.max_cost, seed=FLAGS.seed,
        max_attempts=FLAGS.max_attempts)
  except random_search.RandomSearchError as e:
    raise cli.UsageError(str(e)) from None
  if FLAGS.format == 'json':
    print(json.dumps([s.to_dict() for s in samples], indent=2))
  else:
    print('\n'.join(s.architecture for s in samples))


def run():
  cli.run(main)


if __name__ == '__main__':
  run()
