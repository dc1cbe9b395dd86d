#!/usr/bin/env python3
"""Runs a TuNAS architecture search, on Cloud TPU or on the local CPU.

  python bin/search.py --flagfile=configs/smoke_cpu.cfg --model_dir=/tmp/s
  python bin/search.py --flagfile=configs/imagenet_proxylessnas_tpu.cfg \\
      --tpu=my-tpu --data_dir=gs://bucket/tfds --model_dir=gs://bucket/run1

Rerunning the same command resumes from the last checkpoint. Flag names of
the original TuNAS search binary keep their meaning. MobileNetV4's two-stage
search (docs/mobilenet_v4.md) is a coarse search, then
`--coarse_model_dir=COARSE_DIR` for the fine stage at its result.
`--retarget_from=SEARCH_DIR --rl_cost_model_targets=60,84,110` retargets a
finished search to new cost targets without retraining (docs/retarget.md).
"""

import os
import sys
from typing import Any, Dict, Optional, Tuple

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
from . import retargeting
from . import stages
from tunas_search import cost_models
from tunas_search import data
from tunas_search.search import rewards
from tunas_search.results import selection
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
    'num_classes', 'num_train_examples', 'input_channels', 'class_names',
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
                      resolve.space_help('Search space', reference_nets=False),
                      **fv)
  flags.DEFINE_alias('ssd', 'search_space', **fv)
  flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, '
                      'summaries, config.json and model_spec.json (local '
                      'path or gs://).', **fv)
  flags.DEFINE_alias('checkpoint_dir', 'model_dir', **fv)
  flags.DEFINE_string('coarse_model_dir', None, "The fine stage of "
                      "MobileNetV4's two-stage search: search the fine space "
                      'of the finished coarse search in this model dir (its '
                      'final widths and depths); its dataset, image size and '
                      'cost settings are the defaults (docs/mobilenet_v4.md).',
                      **fv)
  flags.DEFINE_string('coarse_architecture', selection.AUTO, 'With '
                      '--coarse_model_dir: the coarse architecture whose '
                      'widths and depths the fine stage keeps: auto (the '
                      "coarse search's final architecture, as its "
                      'search_result.json and analyze_search report it), '
                      'argmax, in_window, or an architecture string of the '
                      'coarse space.', **fv)
  flags.DEFINE_boolean('allow_unreachable_target', False, 'With '
                       '--coarse_model_dir: search even when no architecture '
                       'of the fine space reaches --rl_cost_model_target '
                       '(refused by default, before anything is written).',
                       **fv)
  flags.DEFINE_string('resume_from', None, 'Continue from this checkpoint of '
                      '--model_dir (e.g. model.ckpt-300) instead of the '
                      'latest, e.g. when the latest is damaged; later '
                      'checkpoints are then overwritten.', **fv)
  flags.DEFINE_string('dataset', CONFIG_FLAGS.default('dataset'),
                      'Dataset: ' + ', '.join(data.REGISTRY.names()) +
                      ', ' + resolve.DATASET_HELP + '.', **fv)
  flags.DEFINE_integer('image_size', None, 'Input resolution (default: the '
                       "dataset's, 224 for ImageNet).", **fv)
  flags.DEFINE_float('rl_cost_model_target', None, 'Cost target (default: '
                     "the space's, 84 ms or 57 ms of simulated Pixel-1 "
                     'latency).', **fv)
  cli.define_auto_bool('use_bfloat16', 'Compute in bfloat16; auto: only for '
                       + ', '.join(search_spaces.bfloat16_names()) +
                       ', as the original TuNAS', **fv)
  config_flags.define_num_replicas(flag_values)
  # A retarget (bin/retargeting.py); defined here so --help lists them.
  flags.DEFINE_string(
      'retarget_from', None, 'Retarget this finished search (its model dir, '
      'only read): train fresh controllers on its fixed shared weights '
      'against --rl_cost_model_target or --rl_cost_model_targets, with its '
      'reward and baseline; no shared-weight training (docs/retarget.md).',
      **fv)
  flags.DEFINE_list(
      'rl_cost_model_targets', None, 'With --retarget_from: several cost '
      'targets, e.g. 60,84,110: one controller each over the same '
      'validation batches; the front (front.json, front.csv, front.png) '
      'holds each one\'s result.', **fv)
  # The rest: one flag per SearchConfig field.
  CONFIG_FLAGS.define(flag_values)


def _search_space(f: flags.FlagValues
                  ) -> Tuple[search_spaces.SearchSpace, Dict[str, Any]]:
  """The space, and the values a fine stage takes from its coarse search."""
  if not f.coarse_model_dir:
    for name in ('coarse_architecture', 'allow_unreachable_target'):
      if f[name].present:
        raise cli.UsageError(f'--{name} needs --coarse_model_dir (the fine '
                             "stage of MobileNetV4's two-stage search)")
    return resolve.search_space(f.search_space, searchable=True), {}
  coarse = stages.read(f.coarse_model_dir, f.coarse_architecture)
  stages.check_search_space(f, coarse)
  logging.info('%s', coarse.describe())
  return (resolve.search_space(coarse.fine_space, searchable=True),
          stages.inherited(f, coarse))


def _values(f: flags.FlagValues, space: search_spaces.SearchSpace,
            inherited: Dict[str, Any]) -> dict:
  """The generated flags' values; --cost_model defaults to the space's."""
  values = CONFIG_FLAGS.values(f)
  if not f['cost_model'].present:
    values['cost_model'] = space.cost_model
  values.update((k, v) for k, v in inherited.items() if k in values)
  return values


def _dataset_info(dataset: str, data_dir: Optional[str],
                  max_steps: Optional[int]) -> data.DatasetInfo:
  try:
    info = cli.get_or_usage(lambda n: data.get_info(n, data_dir), dataset)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  if info.num_train is None and max_steps is None:
    raise cli.UsageError(f'the size of the training split of {dataset} '
                         'is unknown; give --max_steps instead of --epochs')
  return info


def _cost_target(target: Optional[float], space: search_spaces.SearchSpace,
                 cost_model: str, info: data.DatasetInfo,
                 image_size: int) -> Optional[float]:
  """Checks the cost model and returns the cost target (the space's default).

  Raises:
    cli.UsageError: for a cost model that cannot score the space, or one
      without a target (the space's default target is in the unit of its
      default cost model only).
  """
  resolve.check_cost_model(cost_model, space)
  if target is not None or cost_model == _NONE:
    return target
  if cost_model == space.cost_model and space.default_cost_target:
    return space.default_cost_target
  raise cli.UsageError(
      f'--cost_model={cost_model} needs --rl_cost_model_target for '
      f'{space.name} (in {cost_models.get(cost_model).unit}; '
      f'{resolve.largest_cost(space, cost_model, info, image_size)}), or '
      f'--cost_model={_NONE}')


def build_config(f: flags.FlagValues = FLAGS) -> SearchConfig:
  """Validates the flags and turns them into a SearchConfig.

  Raises:
    cli.UsageError: for any bad value, with one line naming it.
  """
  space, inherited = _search_space(f)
  given = {k: inherited.get(k, f[k].value) for k in (
      'dataset', 'data_dir', 'image_size', 'rl_cost_model_target')}
  info = _dataset_info(given['dataset'], given['data_dir'], f.max_steps)
  # `is None`, not `or`: a given 0 is refused, not taken for the default.
  image_size = (info.default_image_size if given['image_size'] is None
                else given['image_size'])
  resolve.check_image_size(image_size)
  with resolve.usage_errors():
    search_spaces.check_image_size(space, image_size)
  values = _values(f, space, inherited)
  if not f.model_dir:
    raise cli.UsageError('--model_dir is required')
  cli.check_output_dir('model_dir', f.model_dir)
  try:
    config = SearchConfig(
        **values, search_space=space.name,
        model_dir=f.model_dir, dataset=given['dataset'],
        image_size=image_size, num_classes=info.num_classes,
        class_names=info.class_names, num_train_examples=info.num_train or 0,
        input_channels=info.channels,
        cost_model_space=space.pixel1_model or space.cost_model_space,
        rl_cost_model_target=_cost_target(
            given['rl_cost_model_target'], space, values['cost_model'], info,
            image_size),
        use_bfloat16=cli.resolve_auto_bool(f.use_bfloat16,
                                           space.default_use_bfloat16),
        num_replicas=config_flags.num_replicas(f))
    if config.cost_model != _NONE:
      cost_models.check_file(config.cost_model,
                             cost_models.context_for(config))
  except (ConfigError, cost_models.LatencyModelError) as e:
    raise cli.UsageError(str(e)) from None
  if f.coarse_model_dir:
    span = stages.check_target(config, space.spec(),
                               f.allow_unreachable_target)
    if span is not None:
      logging.info('%s', stages.describe_range(config, span))
  return config


def main(argv, flag_values: flags.FlagValues = FLAGS):
  """Runs (or resumes) the search; prints its result."""
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if flag_values.retarget_from:  # docs/retarget.md
    retargeting.run(flag_values, CONFIG_FLAGS.names)
    return
  retargeting.check_no_retarget_flags(flag_values)
  config = build_config(flag_values)
  try:
    data.check_available(config.dataset, config.data_dir)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  # Import TensorFlow-heavy modules only once the flags are known to be good.
  # pylint: disable=g-import-not-at-top
  from tunas_search.runtime import model_dir as model_dir_lib
  from tunas_search.search import runner
  # pylint: enable=g-import-not-at-top
  space = search_spaces.get(config.search_space)
  try:
    with resolve.reading_images(config.dataset):
      result = runner.run_search(config, space.spec(),
                                 resume_from=flag_values.resume_from)
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None
  except (runner.NonFiniteLossError, model_dir_lib.DiskFullError) as e:
    cli.fail(str(e), exit_code=cli.FAILURE_EXIT_CODE)
  if result is None:  # A multi-worker search's non-chief worker.
    print(f'Worker done; the chief writes the result to {config.model_dir}')
  else:
    print(runner.format_result(result))


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
