#!/usr/bin/env python3
"""Exports a train_eval model dir as a SavedModel and TFLite models.

  python bin/export_model.py --model_dir=/tmp/final
  python bin/export_model.py --model_dir=/tmp/final --quantize=int8
  python bin/export_model.py --model_dir=/tmp/final --export_dir=/tmp/out \\
      --checkpoint=/tmp/final/model.ckpt-1000 --notflite

The SavedModel's serving signature takes float32 images [N, S, S, C] already
normalised like the input pipeline ((x / 255 - mean) / std per channel;
export_info.json records S, C, mean and std) and returns logits and
probabilities. Beside it: the float TFLite model and, with --quantize, a
post-training quantized one (int8: full integer, activation ranges from
--calibration_images of the run's training split; --int8_io for int8 input
and output tensors); export_info.json records each model's input and output
quantization parameters and, unless --noevaluate, every model's top-1/top-5
on the run's evaluation split (batch 1 through the interpreter; each
image's predictions in predictions.json). A re-export replaces the earlier
one atomically: a failure or a kill leaves it as it was.
"""

import dataclasses
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
from . import config_flags
from tunas_search.config import ConfigError
from tunas_search.config.export import ExportOptions

OPTION_FLAGS = config_flags.ConfigFlags(ExportOptions, ())


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines this tool's flags (called by `run()`; see describe_arch)."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string('model_dir', None, 'Model dir of a train_eval run.',
                      **fv)
  flags.DEFINE_string('export_dir', None, 'Output directory (default: '
                      '<model_dir>/export; an earlier export is replaced).',
                      **fv)
  flags.DEFINE_string('checkpoint', None, 'Checkpoint prefix of --model_dir, '
                      'e.g. model.ckpt-1000 (default: the latest).', **fv)
  OPTION_FLAGS.define(flag_values)


def main(argv, flag_values: flags.FlagValues = flags.FLAGS):
  """Exports and prints what was written as JSON."""
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  f = flag_values
  if not f.model_dir:
    raise cli.UsageError('--model_dir is required')
  try:
    options = ExportOptions(**OPTION_FLAGS.values(f))
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None
  if f.export_dir:
    cli.check_output_dir('export_dir', f.export_dir)
  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import export
  from tunas_search.runtime import model_dir as model_dir_lib
  # pylint: enable=g-import-not-at-top
  try:
    # Named as --resume_from is, listing the run's checkpoints; before the
    # export builds anything.
    checkpoint = f.checkpoint and model_dir_lib.find_checkpoint(
        f.model_dir, f.checkpoint, flag='checkpoint')
    result = export.export_run(f.model_dir, f.export_dir, checkpoint,
                               options)
  except (export.ExportError, model_dir_lib.ModelDirError) as e:
    raise cli.UsageError(str(e)) from None
  except export.ExportFailedError as e:
    cli.fail(f'{e}; the earlier export, if any, is unchanged',
             exit_code=cli.FAILURE_EXIT_CODE)
  logging.info('Exported step %d of %s to %s', result.global_step,
               result.checkpoint, result.export_dir)
  warning = export.accuracy_warning(result, options.max_top1_drop)
  if warning:
    logging.warning('%s', warning)
  print(json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True))


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
