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
from a search's final architecture with --search_model_dir. Rerunning the
same command resumes from the last checkpoint; --mode=evaluate on a model dir
needs no architecture flags. The recipe is TuNAS's (SPEC.md sections 6-7).
"""

import dataclasses
import json
import os
import sys

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags

import search_spaces
from bin import cli
from tunas_search import architecture
from tunas_search import data
from tunas_search.config import ConfigError
from tunas_search.standalone import config as config_lib
from tunas_search.standalone.config import TrainEvalConfig

FORMATS = ('text', 'json')


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines this tool's flags (called by `run()`; see describe_arch)."""
  fv = dict(flag_values=flag_values)
  # What to train and where.
  flags.DEFINE_string('search_space', None, 'A search space or reference net: '
                      + ', '.join(search_spaces.names()), **fv)
  flags.DEFINE_string('indices', None, 'Architecture string a:b:c:... '
                      '(default: the reference net, or the largest network '
                      'of a space).', **fv)
  flags.DEFINE_string('search_model_dir', None, 'Train the final '
                      'architecture of this search (argmax of its latest '
                      'logits) instead of --search_space/--indices.', **fv)
  flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, '
                      'summaries, config.json and eval results.', **fv)
  flags.DEFINE_enum('mode', 'train_and_eval', list(config_lib.MODES),
                    'What to do.', **fv)
  flags.DEFINE_string('dataset', None, 'Dataset: ' + ', '.join(
      data.REGISTRY.names()) + ', or tfds:NAME (default: the search\'s '
                      'with --search_model_dir, else embedded).', **fv)
  flags.DEFINE_string('data_dir', None, 'TFDS data directory.', **fv)
  flags.DEFINE_integer('image_size', None, 'Input resolution (default: the '
                       "search's, else the dataset's).", **fv)
  flags.DEFINE_enum('train_split', 'train', list(config_lib.TRAIN_SPLITS),
                    'train: the search-training split; train_full: all '
                    'official training images (final test runs).', **fv)
  flags.DEFINE_enum('eval_split', 'test', list(config_lib.EVAL_SPLITS),
                    'test: the official test/validation set; validation: '
                    'held out from training, to rank candidates.', **fv)
  # Recipe (SPEC.md sections 2, 6, 7).
  flags.DEFINE_integer('train_batch_size', 4096, 'Global training batch.',
                       **fv)
  flags.DEFINE_integer('eval_batch_size', 1000, 'Global evaluation batch.',
                       **fv)
  flags.DEFINE_float('epochs', 90.0, 'Epochs over the training split.', **fv)
  flags.DEFINE_integer('max_steps', None, 'Training steps; overrides '
                       '--epochs.', **fv)
  flags.DEFINE_integer('steps_per_eval', None, 'train_and_eval: evaluate '
                       'every this many steps (default: at the end).', **fv)
  flags.DEFINE_float('model_learning_rate', 0.165, 'RMSProp learning rate '
                     'per 256 images.', **fv)
  flags.DEFINE_float('model_warmup_steps_fraction', 0.025, 'Fraction of '
                     'steps of linear learning-rate warm-up.', **fv)
  flags.DEFINE_float('model_momentum', 0.9, 'RMSProp momentum.', **fv)
  flags.DEFINE_float('model_weight_decay', None, 'L2 weight decay (default '
                     '4e-5, or 3e-5 with bfloat16).', **fv)
  flags.DEFINE_float('label_smoothing', 0.1, 'Label smoothing.', **fv)
  flags.DEFINE_float('dropout_rate', None, 'Dropout before the classifier '
                     '(default 0 below 150 epochs, else 0.2).', **fv)
  flags.DEFINE_float('path_dropout_rate', 0.0, 'Stochastic depth on residual '
                     'branches.', **fv)
  flags.DEFINE_string('init_from_search', None, 'Start from the shared '
                      'weights of this search (fine-tuning).', **fv)
  flags.DEFINE_bool('freeze_backbone', False, 'Train only the classifier (a '
                    'linear probe of the initial features).', **fv)
  # Execution.
  flags.DEFINE_bool('use_bfloat16', False, 'Compute in bfloat16.', **fv)
  flags.DEFINE_bool('use_tpu', False, 'Run on Cloud TPU (needs --tpu).', **fv)
  flags.DEFINE_string('tpu', None, 'Cloud TPU name or grpc:// address.', **fv)
  flags.DEFINE_string('tpu_zone', None, 'Cloud TPU zone.', **fv)
  flags.DEFINE_string('gcp_project', None, 'Google Cloud project.', **fv)
  flags.DEFINE_integer('num_replicas', None, 'TPU cores (default 8 with '
                       '--use_tpu, else 1).', **fv)
  flags.DEFINE_integer('tpu_iterations_per_loop', 100, 'Steps per host loop; '
                       'summaries are written this often.', **fv)
  flags.DEFINE_integer('save_checkpoints_steps', None, 'Checkpoint interval '
                       '(default: every 5 host loops, and at the end).', **fv)
  flags.DEFINE_integer('keep_checkpoint_max', 5, 'Checkpoints kept.', **fv)
  flags.DEFINE_integer('seed', None, 'Random seed (graph and input).', **fv)
  flags.DEFINE_string('format', 'text', 'Result format: ' +
                      ', '.join(FORMATS), **fv)


def _architecture(f: flags.FlagValues):
  """(space name, spec, indices string, search config or None) from flags."""
  if f.search_model_dir:
    if f.search_space or f.indices:
      raise cli.UsageError('give either --search_model_dir or '
                           '--search_space/--indices, not both')
    from tunas_search import analysis  # pylint: disable=g-import-not-at-top
    from tunas_search import train_eval  # pylint: disable=g-import-not-at-top
    try:
      search, spec, indices = train_eval.architecture_from_search(
          f.search_model_dir)
    except analysis.AnalysisError as e:
      raise cli.UsageError(f'--search_model_dir: {e}') from None
    return search.search_space, spec, indices, search
  space = cli.get_or_usage(search_spaces.get, f.search_space)
  spec = space.spec()
  try:
    indices = (architecture.parse_indices(f.indices, spec) if f.indices
               else list(space.default_indices()))
  except architecture.ArchitectureError as e:
    raise cli.UsageError(f'--indices: {e}') from None
  return space.name, spec, architecture.format_indices(indices), None


def _replicas(f: flags.FlagValues) -> int:
  replicas = f.num_replicas or (8 if f.use_tpu else 1)
  if f.use_tpu and not f.tpu:
    raise cli.UsageError('--use_tpu needs --tpu=NAME (or a grpc:// address)')
  return replicas


def _stored_run(f: flags.FlagValues):
  """--mode=evaluate without architecture flags: the model dir's own run."""
  from tunas_search import train_eval  # pylint: disable=g-import-not-at-top
  stored, spec = train_eval.load_run(f.model_dir)
  return dataclasses.replace(
      stored, model_dir=f.model_dir, mode='evaluate',
      eval_split=f.eval_split, eval_batch_size=f.eval_batch_size,
      data_dir=f.data_dir or stored.data_dir, use_tpu=f.use_tpu, tpu=f.tpu,
      tpu_zone=f.tpu_zone, gcp_project=f.gcp_project,
      num_replicas=_replicas(f)), spec


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
  try:
    if (f.mode == 'evaluate' and not (f.search_space or f.search_model_dir)
        and os.path.exists(os.path.join(f.model_dir, 'config.json'))):
      return _stored_run(f)
    if not (f.search_space or f.search_model_dir):
      raise cli.UsageError('--search_space or --search_model_dir is '
                           'required; search spaces and reference nets: '
                           + ', '.join(search_spaces.names()))
    name, spec, indices, search = _architecture(f)
    dataset = f.dataset or (search.dataset if search else 'embedded')
    info = cli.get_or_usage(lambda n: data.get_info(n, f.data_dir), dataset)
    if info.num_examples(f.train_split) is None and f.max_steps is None:
      raise cli.UsageError(f'the size of the {f.train_split} split of '
                           f'{dataset} is unknown; give --max_steps')
    image_size = f.image_size or (search.image_size if search
                                  else info.default_image_size)
    return TrainEvalConfig(
        search_space=name, indices=indices, model_dir=f.model_dir,
        num_classes=info.num_classes,
        num_train_examples=info.num_examples(f.train_split) or 0,
        dataset=dataset, data_dir=f.data_dir, image_size=image_size,
        input_channels=info.channels, mode=f.mode,
        train_split=f.train_split, eval_split=f.eval_split,
        train_batch_size=f.train_batch_size,
        eval_batch_size=f.eval_batch_size, epochs=f.epochs,
        max_steps=f.max_steps, steps_per_eval=f.steps_per_eval,
        model_learning_rate=f.model_learning_rate,
        model_warmup_steps_fraction=f.model_warmup_steps_fraction,
        model_momentum=f.model_momentum,
        model_weight_decay=f.model_weight_decay,
        label_smoothing=f.label_smoothing, dropout_rate=f.dropout_rate,
        path_dropout_rate=f.path_dropout_rate,
        init_from_search=f.init_from_search,
        freeze_backbone=f.freeze_backbone, use_bfloat16=f.use_bfloat16,
        use_tpu=f.use_tpu, tpu=f.tpu, tpu_zone=f.tpu_zone,
        gcp_project=f.gcp_project, num_replicas=_replicas(f),
        tpu_iterations_per_loop=f.tpu_iterations_per_loop,
        save_checkpoints_steps=f.save_checkpoints_steps,
        keep_checkpoint_max=f.keep_checkpoint_max, seed=f.seed), spec
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
  from tunas_search import train_eval  # pylint: disable=g-import-not-at-top
  try:
    result = train_eval.run(config, spec)
  except (ConfigError, train_eval.WarmStartError) as e:
    raise cli.UsageError(str(e)) from None
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
