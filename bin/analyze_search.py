#!/usr/bin/env python3
"""Reports what a search prefers: architecture, costs and probabilities.

  python bin/analyze_search.py --model_dir=/tmp/search
  python bin/analyze_search.py --model_dir=gs://bucket/run1 --step=20000 \\
      --format=json --plot=history.png

Works on a search that is still running. The architecture is the argmax of
every decision's logits in the latest checkpoint, or with --step at the last
checkpoint or logged step at or before it (SPEC.md section 7).
"""

import os
import sys

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
from absl import logging

from bin import cli
from tunas_search import analysis

FLAGS = flags.FLAGS

flags.DEFINE_string('model_dir', None, 'Model dir of the search (local path '
                    'or gs://).')
flags.DEFINE_integer('step', None, 'Analyse the latest checkpoint or logged '
                     'step at or before this global step (default: the '
                     'latest checkpoint).', lower_bound=0)
flags.DEFINE_string('format', 'text', 'Output format: ' +
                    ', '.join(analysis.FORMATS))
flags.DEFINE_string('plot', None, 'Also draw choice probabilities, estimated '
                    'cost and reward over steps into this image file (.png); '
                    'needs matplotlib.')


def main(argv):
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if FLAGS.format not in analysis.FORMATS:
    raise cli.UsageError(f'unknown --format {FLAGS.format!r}; valid choices: '
                         f'{", ".join(analysis.FORMATS)}')
  if not FLAGS.model_dir:
    raise cli.UsageError('--model_dir is required')
  try:
    _, spec = analysis.load_search(FLAGS.model_dir)  # Fails fast if not one.
    scalars = analysis.read_scalars(FLAGS.model_dir) if FLAGS.plot else None
    result = analysis.analyze(FLAGS.model_dir, FLAGS.step, scalars)
    if FLAGS.plot:
      analysis.plot_history(FLAGS.plot, spec, scalars, title=(
          f'{result.search_space} in {FLAGS.model_dir}'))
      logging.info('Wrote %s', FLAGS.plot)
  except analysis.AnalysisError as e:
    raise cli.UsageError(str(e)) from None
  print(analysis.FORMATTERS[FLAGS.format](result).rstrip('\n'))


def run():
  cli.run(main)


if __name__ == '__main__':
  run()
