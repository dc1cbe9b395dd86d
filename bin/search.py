#!/usr/bin/env python3
"""Runs a TuNAS architecture search, on Cloud TPU or on the local CPU.

  python bin/search.py --flagfile=configs/smoke_cpu.cfg --model_dir=/tmp/s
  python bin/search.py --flagfile=configs/imagenet_proxylessnas_tpu.cfg \\
      --tpu=my-tpu --data_dir=gs://bucket/tfds --model_dir=gs://bucket/run1

Rerunning the same command resumes from the last checkpoint. Flag names of
the original TuNAS search binary keep their meaning.
"""

import os
import sys
from typing import Optional

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
from . import config_flags
from tunas_search import cost_models
from tunas_search import data
from tunas_search import rewards
from tunas_search.config import ConfigError, SearchConfig

_NONE = cost_models.NONE
FLAGS = flags.FLAGS

# SearchConfig fields that are no generated flag; every other field is one,
# with the field's name, type, default and help (bin/config_flags.py).
_NOT_FLAGS = (
    # Flags defined by hand in define_flags: an alias, an auto value or a
    # default that depends on other flags.
    'search_space', 'model_dir', 'dataset', 'image_size', 'use_bfloat16',
    'num_replicas', 'rl_cost_model_target',
    # Derived from the dataset and the search space.
    'num_classes', 'num_train_examples', 'input_channels',
    'cost_model_space',
    # The recipe's constants (docs/method.md sections 2 and 6): the original
    # search binary has no flag for them.
    'model_rmsprop_decay', 'model_rmsprop_epsilon', 'label_smoothing',
    'log_every_steps')
CONFIG_FLAGS = config_flags.ConfigFlags(
    SearchConfig, _NOT_FLAGS, registry_names={
        'rl_reward_function': config_flags.RegistryNames(
            'reward function', rewards.REGISTRY.names()),
        'cost_model': config_flags.RegistryNames(
            'cost model', [*cost_models.names(), _NONE]),
    })


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines this tool's flags (called by `run()`)."""
  fv = dict(flag_values=flag_values)
  # What to search and where.
  flags.DEFINE_string('search_space', 'proxylessnas_search',
                      'Search space: ' + ', '.join(
                          search_spaces.search_space_names()), **fv)
  flags.DEFINE_alias('ssd', 'search_space', **fv)
  flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, '
                      'summaries, config.json and model_spec.json (local '
                      'path or gs://).', **fv)
  flags.DEFINE_alias('checkpoint_dir', 'model_dir', **fv)
  flags.DEFINE_string('resume_from', None, 'Continue from this checkpoint of '
                      '--model_dir (e.g. model.ckpt-300) instead of the '
                      'latest, e.g. when the latest is damaged; later '
                      'checkpoints are then overwritten.', **fv)
  flags.DEFINE_string('dataset', CONFIG_FLAGS.default('dataset'),
                      'Dataset: ' + ', '.join(data.REGISTRY.names()) +
                      ', or tfds:NAME for another TFDS dataset.', **fv)
  flags.DEFINE_integer('image_size', None, 'Input resolution (default: the '
                       "dataset's, 224 for ImageNet).", **fv)
  flags.DEFINE_float('rl_cost_model_target', None, 'Cost target (default: '
                     "the space's, 84 ms or 57 ms of simulated Pixel-1 "
                     'latency).', **fv)
  cli.define_auto_bool('use_bfloat16', 'Compute in bfloat16; auto: only for '
                       + ', '.join(search_spaces.bfloat16_names()) +
                       ', as the original TuNAS', **fv)
  config_flags.define_num_replicas(flag_values)
  # The rest: one flag per SearchConfig field.
  CONFIG_FLAGS.define(flag_values)


def _search_space(f: flags.FlagValues) -> search_spaces.SearchSpace:
  if f.search_space in search_spaces.reference_names():
    raise cli.UsageError(
        f'{f.search_space!r} is a reference architecture, not a search '
        'space; train it with bin/train_eval.py. Search spaces: '
        + ', '.join(search_spaces.search_space_names()))
  return cli.get_or_usage(search_spaces.get, f.search_space)


def _dataset_info(f: flags.FlagValues) -> data.DatasetInfo:
  try:
    info = cli.get_or_usage(lambda n: data.get_info(n, f.data_dir),
                            f.dataset)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  if info.num_train is None and f.max_steps is None:
    raise cli.UsageError(f'the size of the training split of {f.dataset} '
                         'is unknown; give --max_steps instead of --epochs')
  return info


def _cost_target(f: flags.FlagValues,
                 space: search_spaces.SearchSpace) -> Optional[float]:
  """Checks --cost_model and returns the cost target (the space's default).

  The config refuses a missing target for any cost model but none.
  """
  if f.cost_model != _NONE and not cost_models.get(f.cost_model).applies(
      space.pixel1_model, space.spec()):
    raise cli.UsageError(f'cost model {f.cost_model!r} does not apply to '
                         f'{space.name}; use --cost_model=madds, params or '
                         f'{_NONE}')
  if f.rl_cost_model_target is None and f.cost_model == 'pixel1_latency':
    return space.default_cost_target
  return f.rl_cost_model_target


def build_config(f: flags.FlagValues = FLAGS) -> SearchConfig:
  """Validates the flags and turns them into a SearchConfig.

  Raises:
    cli.UsageError: for any bad value, with one line naming it.
  """
  space = _search_space(f)
  info = _dataset_info(f)
  if not f.model_dir:
    raise cli.UsageError('--model_dir is required')
  cli.check_output_dir('model_dir', f.model_dir)
  try:
    return SearchConfig(
        **CONFIG_FLAGS.values(f), search_space=space.name,
        model_dir=f.model_dir, dataset=f.dataset,
        image_size=f.image_size or info.default_image_size,
        num_classes=info.num_classes,
        num_train_examples=info.num_train or 0,
        input_channels=info.channels, cost_model_space=space.pixel1_model,
        rl_cost_model_target=_cost_target(f, space),
        use_bfloat16=cli.resolve_auto_bool(f.use_bfloat16,
                                           space.default_use_bfloat16),
        num_replicas=config_flags.num_replicas(f))
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None


def main(argv, flag_values: flags.FlagValues = FLAGS):
  """Runs (or resumes) the search; prints its result."""
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = build_config(flag_values)
  try:
    data.check_available(config.dataset, config.data_dir)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  # Import TensorFlow-heavy modules only once the flags are known to be good.
  from tunas_search import runner  # pylint: disable=g-import-not-at-top
  space = search_spaces.get(config.search_space)
  try:
    result = runner.run_search(config, space.spec(),
                               resume_from=flag_values.resume_from)
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None
  except runner.NonFiniteLossError as e:
    cli.fail(str(e), exit_code=1)
  if result is None:  # A multi-worker search's non-chief worker.
    print(f'Worker done; the chief writes the result to {config.model_dir}')
  else:
    print(runner.format_result(result))


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
