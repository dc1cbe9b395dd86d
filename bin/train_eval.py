#!/usr/bin/env python3
"""Trains and evaluates one architecture stand-alone, on Cloud TPU or CPU.

  python bin/train_eval.py --search_space=proxylessnas_mobile \\
      --model_dir=/tmp/mobile --train_batch_size=64 --max_steps=1000
  python bin/train_eval.py --search_model_dir=/tmp/search \\
      --model_dir=/tmp/final --epochs=90
  python bin/train_eval.py --search_model_dir=/tmp/search \\
      --init_from_search=/tmp/search --model_dir=/tmp/finetune --epochs=5
  python bin/train_eval.py --model_dir=/tmp/final --mode=evaluate \\
      --eval_split=validation

The architecture comes from --search_space (a space or reference net) with
--indices (default: the reference net, or the space's largest network), or
from a search's final architecture with --search_model_dir (see
--final_architecture). Rerunning the
same command resumes from the last checkpoint; --mode=evaluate on a model dir
needs no architecture flags. The recipe is TuNAS's (docs/method.md sections 6-7).
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

import search_spaces
from . import cli
from . import config_flags
from . import resolve
from tunas_search.space import architecture
from tunas_search import data
from tunas_search.results import selection
from tunas_search.config import ConfigError
from tunas_search.config.standalone import TrainEvalConfig

FORMATS = ('text', 'json')

# TrainEvalConfig fields that are no generated flag; every other field is
# one, with the field's name, type, default and help (bin/config_flags.py).
_NOT_FLAGS = (
    # Flags defined by hand in define_flags: an auto value, or a default
    # that depends on other flags (the search's, the dataset's, the space's).
    'search_space', 'model_dir', 'indices', 'dataset', 'image_size',
    'use_bfloat16', 'num_replicas',
    # Derived from the dataset and --train_split.
    'num_classes', 'num_train_examples', 'input_channels', 'class_names',
    # The recipe's constants (docs/method.md sections 2 and 6): no flag.
    'model_rmsprop_decay', 'model_rmsprop_epsilon', 'log_every_steps')
CONFIG_FLAGS = config_flags.ConfigFlags(TrainEvalConfig, _NOT_FLAGS)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines this tool's flags (called by `run()`; see describe_arch)."""
  fv = dict(flag_values=flag_values)
  # What to train and where.
  flags.DEFINE_string('search_space', None, resolve.space_help(
      'A search space or reference net'), **fv)
  flags.DEFINE_string('indices', None, 'Architecture string a:b:c:... '
                      '(default: the reference net, or the largest network '
                      'of a space).', **fv)
  flags.DEFINE_string('search_model_dir', None, 'Train the final '
                      'architecture of this search (--final_architecture of '
                      'its latest logits) instead of --search_space/'
                      '--indices.', **fv)
  flags.DEFINE_enum('final_architecture', selection.AUTO, selection.RULES,
                    'With --search_model_dir: argmax (TuNAS), in_window '
                    "(the controller's most probable sampled architecture "
                    'in the cost window) or auto (argmax when it lies in the'
                    ' window, else in_window).', **fv)
  flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, '
                      'summaries, config.json and eval results.', **fv)
  flags.DEFINE_string('resume_from', None, 'Continue from this checkpoint of '
                      '--model_dir (e.g. model.ckpt-300) instead of the '
                      'latest, e.g. when the latest is damaged.', **fv)
  flags.DEFINE_string('dataset', None, 'Dataset: ' + ', '.join(
      data.REGISTRY.names()) + ', ' + resolve.DATASET_HELP + ' (default: '
                      "the search's with --search_model_dir, else "
                      f'{CONFIG_FLAGS.default("dataset")}).', **fv)
  flags.DEFINE_integer('image_size', None, 'Input resolution (default: the '
                       "search's, else the dataset's).", **fv)
  cli.define_auto_bool('use_bfloat16', 'Compute in bfloat16; auto: only for '
                       'architectures of ' + ', '.join(
                           search_spaces.bfloat16_names()) +
                       ', as the original TuNAS', **fv)
  config_flags.define_num_replicas(flag_values)
  flags.DEFINE_string('format', 'text', 'Result format: ' +
                      ', '.join(FORMATS), **fv)
  # The rest: one flag per TrainEvalConfig field.
  CONFIG_FLAGS.define(flag_values)


def _architecture(f: flags.FlagValues):
  """(space name, spec, indices string, search config or None) from flags."""
  if f.search_model_dir:
    if f.search_space or f.indices:
      raise cli.UsageError('give either --search_model_dir or '
                           '--search_space/--indices, not both')
    from tunas_search.results import analysis  # pylint: disable=g-import-not-at-top
    try:
      search, spec = analysis.load_search(f.search_model_dir)
      choice = selection.for_search(
          search, spec, analysis.analyze(f.search_model_dir)).choose(
              f.final_architecture)
    except (analysis.AnalysisError, selection.SelectionError) as e:
      raise cli.UsageError(f'--search_model_dir: {e}') from None
    logging.info('The search\'s final architecture (%s): %s', choice.label,
                 choice.architecture)
    return search.search_space, spec, choice.architecture, search
  space = resolve.search_space(f.search_space)
  spec = space.spec()
  try:
    indices = (architecture.parse_indices(f.indices, spec) if f.indices
               else list(space.default_indices()))
  except architecture.ArchitectureError as e:
    raise cli.UsageError(f'--indices: {e}') from None
  return space.name, spec, architecture.format_indices(indices), None


def _stored_run(f: flags.FlagValues):
  """--mode=evaluate without architecture flags: the model dir's own run."""
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  stored, spec = train_eval.load_run(f.model_dir)
  return dataclasses.replace(
      stored, model_dir=f.model_dir, mode='evaluate',
      eval_split=f.eval_split, eval_batch_size=f.eval_batch_size,
      data_dir=f.data_dir or stored.data_dir, use_tpu=f.use_tpu, tpu=f.tpu,
      tpu_zone=f.tpu_zone, gcp_project=f.gcp_project,
      num_replicas=config_flags.num_replicas(f)), spec


def build_config(f: flags.FlagValues = flags.FLAGS):
  """Validates the flags and turns them into (TrainEvalConfig, model spec).

  Raises:
    cli.UsageError: for any bad value, with one line naming it.
  """
  if f.format not in FORMATS:
    raise cli.UsageError(f'unknown --format {f.format!r}; valid choices: '
                         f'{", ".join(FORMATS)}')
  if not f.model_dir:
    raise cli.UsageError('--model_dir is required')
  cli.check_output_dir('model_dir', f.model_dir)
  try:
    if (f.mode == 'evaluate' and not (f.search_space or f.search_model_dir)
        and os.path.exists(os.path.join(f.model_dir, 'config.json'))):
      return _stored_run(f)
    if not (f.search_space or f.search_model_dir):
      raise cli.UsageError('--search_space or --search_model_dir is '
                           'required; search spaces and reference nets: '
                           + ', '.join(search_spaces.names()) + ', '
                           + resolve.USER_SPACES)
    name, spec, indices, search = _architecture(f)
    dataset = f.dataset or (search.dataset if search else
                            CONFIG_FLAGS.default('dataset'))
    info = cli.get_or_usage(lambda n: data.get_info(n, f.data_dir), dataset)
    if info.num_examples(f.train_split) is None and f.max_steps is None:
      raise cli.UsageError(f'the size of the {f.train_split} split of '
                           f'{dataset} is unknown; give --max_steps')
    # `is None`, not `or`: a given 0 is refused, not taken for the default.
    image_size = f.image_size
    if image_size is None:
      image_size = search.image_size if search else info.default_image_size
    if not search:
      resolve.search_space(name, image_size=image_size)
    return TrainEvalConfig(
        **CONFIG_FLAGS.values(f), search_space=name, model_dir=f.model_dir,
        indices=indices, dataset=dataset, image_size=image_size,
        num_classes=info.num_classes, class_names=info.class_names,
        num_train_examples=info.num_examples(f.train_split) or 0,
        input_channels=info.channels,
        use_bfloat16=cli.resolve_auto_bool(
            f.use_bfloat16, search_spaces.default_use_bfloat16(name)),
        num_replicas=config_flags.num_replicas(f)), spec
  except (ConfigError, data.DataError) as e:
    raise cli.UsageError(str(e)) from None


def main(argv, flag_values: flags.FlagValues = flags.FLAGS):
  """Trains and/or evaluates; prints the last evaluation."""
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config, spec = build_config(flag_values)
  try:
    data.check_available(config.dataset, config.data_dir)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  # Import TensorFlow-heavy modules only once the flags are known to be good.
  # pylint: disable=g-import-not-at-top
  from tunas_search.runtime import model_dir as model_dir_lib
  from tunas_search.standalone import train_eval
  # pylint: enable=g-import-not-at-top
  try:
    with resolve.reading_images(config.dataset):
      result = train_eval.run(config, spec,
                              resume_from=flag_values.resume_from)
  except (ConfigError, train_eval.WarmStartError) as e:
    raise cli.UsageError(str(e)) from None
  except model_dir_lib.DiskFullError as e:
    cli.fail(str(e), exit_code=cli.FAILURE_EXIT_CODE)
  if result is None:
    print(f'Trained to step {config.total_steps} in {config.model_dir}')
  elif flag_values.format == 'json':
    print(json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True))
  else:
    print(train_eval.format_result(result))


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
