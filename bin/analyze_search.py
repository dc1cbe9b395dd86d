#!/usr/bin/env python3
"""Reports what a search prefers: architecture, costs and probabilities.

  python bin/analyze_search.py --model_dir=/tmp/search
  python bin/analyze_search.py --model_dir=gs://bucket/run1 --step=20000 \\
      --format=json --plot=history.png

Works on a search that is still running. The architecture is the argmax of
every decision's logits in the latest checkpoint, or with --step at the last
checkpoint or logged step at or before it (docs/method.md section 7). The
report ends with the final architecture of --final_architecture (default
auto: the argmax if it lies in the cost window around the target, else the
controller's most probable sampled architecture inside it) and how settled
the controller is (docs/evaluate_search.md, "Landing on the target").
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
from absl import logging

from . import cli
from tunas_search.results import analysis
from tunas_search import cost_models
from tunas_search.results import render as report
from tunas_search.results import selection


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines this tool's flags (called by `run()`; see describe_arch)."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string('model_dir', None, 'Model dir of the search (local '
                      'path or gs://).', **fv)
  flags.DEFINE_integer('step', None, 'Analyse the latest checkpoint or '
                       'logged step at or before this global step (default: '
                       'the latest checkpoint).', lower_bound=0, **fv)
  flags.DEFINE_string('format', 'text', 'Output format: ' +
                      ', '.join(report.FORMATS), **fv)
  flags.DEFINE_string('plot', None, 'Also draw choice probabilities, '
                      'estimated cost and reward over steps into this local '
                      'image file (.png, .pdf, .svg, ...; PNG without an '
                      'extension); needs matplotlib.',
                      **fv)
  flags.DEFINE_enum('final_architecture', selection.AUTO, selection.RULES,
                    'Which architecture the search returns: argmax (TuNAS), '
                    "in_window (the controller's most probable sampled "
                    'architecture in the cost window) or auto (argmax when '
                    'it lies in the window, else in_window).', **fv)


def main(argv, flag_values: flags.FlagValues = flags.FLAGS):
  """Prints the analysis; draws --plot.

  Raises:
    cli.UsageError: on a bad flag value or a model dir that is no search.
  """
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  f = flag_values
  if f.format not in report.FORMATS:
    raise cli.UsageError(f'unknown --format {f.format!r}; valid choices: '
                         f'{", ".join(report.FORMATS)}')
  if not f.model_dir:
    raise cli.UsageError('--model_dir is required')
  if f.plot:
    cli.check_output_file('plot', f.plot)
    _check_plot_format(f.plot)
  try:
    config, spec = analysis.load_search(f.model_dir)  # Fails fast if not one.
    scalars = analysis.read_scalars(f.model_dir) if f.plot else None
    result = analysis.analyze(f.model_dir, f.step, scalars)
    choice = selection.for_search(config, spec, result).choose(
        f.final_architecture)
    if f.plot:
      _plot(f.plot, spec, scalars, result)
  except (analysis.AnalysisError, selection.SelectionError) as e:
    raise cli.UsageError(str(e)) from None
  print(_format(f.format, result, choice, config).rstrip('\n'))


def _format(fmt: str, result: analysis.Analysis, choice: selection.Choice,
            config) -> str:
  """The report; text and JSON end with the final architecture."""
  if fmt == 'json':
    return json.dumps(dict(result.to_dict(),
                           final_architecture=choice.to_dict()), indent=2)
  text = report.FORMATTERS[fmt](result)
  if fmt == 'text':
    unit = ('' if config.cost_model == cost_models.NONE
            else cost_models.get(config.cost_model).unit)
    text += '\n\n' + selection.format_text(choice, unit)
  return text


def _check_plot_format(path: str) -> None:
  """Raises a UsageError unless matplotlib can write `path`'s extension."""
  try:
    from matplotlib import backend_bases  # pylint: disable=g-import-not-at-top
  except ImportError:
    return  # report.plot_history says how to install it.
  formats = backend_bases.FigureCanvasBase.get_supported_filetypes()
  extension = os.path.splitext(path)[1][1:].lower()
  # No extension: PNG (`_plot`).
  if extension and extension not in formats:
    raise cli.UsageError(f'--plot={path}: unknown image format '
                         f'{extension!r}; valid choices: '
                         f'{", ".join(sorted(formats))}')


def _plot(path: str, spec, scalars, result: analysis.Analysis) -> None:
  """Draws the history; a failure leaves an earlier file at `path` as is."""
  try:
    with cli.atomic_output_file(path, default_extension='.png') as temporary:
      report.plot_history(temporary, spec, scalars, title=(
          f'{result.search_space} in {result.model_dir}'))
  except OSError as e:
    cli.fail(f'cannot write --plot={path}: {e.strerror or e}',
             exit_code=cli.FAILURE_EXIT_CODE)
  logging.info('Wrote %s', path)


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
