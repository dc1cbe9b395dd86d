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

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from absl import logging

import search_spaces
from bin import cli
from tunas_search import cost_models
from tunas_search import data
from tunas_search import rewards
from tunas_search.config import ConfigError, SearchConfig

_NONE = 'none'
FLAGS = flags.FLAGS

# What to search and where.
flags.DEFINE_string('search_space', 'proxylessnas_search',
                    'Search space: ' + ', '.join(
                        search_spaces.search_space_names()))
flags.DEFINE_alias('ssd', 'search_space')
flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, summaries, '
                    'config.json and model_spec.json (local path or gs://).')
flags.DEFINE_alias('checkpoint_dir', 'model_dir')
flags.DEFINE_string('dataset', 'embedded',
                    'Dataset: ' + ', '.join(data.REGISTRY.names()) +
                    ', or tfds:NAME for another TFDS dataset.')
flags.DEFINE_string('data_dir', None, 'TFDS data directory (not needed for '
                    'the embedded dataset). Nothing is ever downloaded.')
flags.DEFINE_integer('image_size', None, 'Input resolution (default: the '
                     "dataset's, 224 for ImageNet).")
# Shared-weight training (SPEC.md section 6).
flags.DEFINE_integer('train_batch_size', 4096, 'Global training batch size.')
flags.DEFINE_float('epochs', 90.0, 'Epochs over the search-training split.')
flags.DEFINE_integer('max_steps', None, 'Number of steps; overrides --epochs.')
flags.DEFINE_float('model_learning_rate', 0.165,
                   'RMSProp learning rate per 256 images.')
flags.DEFINE_float('model_warmup_steps_fraction', 0.025,
                   'Fraction of steps of linear learning-rate warm-up.')
flags.DEFINE_float('model_momentum', 0.9, 'RMSProp momentum.')
flags.DEFINE_float('model_weight_decay', None,
                   'L2 weight decay (default 4e-5, or 3e-5 with bfloat16).')
# Controller (SPEC.md section 5).
flags.DEFINE_float('rl_learning_rate', 3e-4,
                   'Controller Adam learning rate per 256 images.')
flags.DEFINE_bool('use_exponential_rl_learning_rate_schedule', True,
                  'Multiply the controller learning rate by 10^progress after '
                  'the RL delay.')
flags.DEFINE_float('rl_entropy_regularization', 0.0,
                   'Weight of the entropy bonus in the controller loss.')
flags.DEFINE_float('rl_baseline_momentum', 0.95, 'Momentum of the EMA reward '
                   'baseline.')
flags.DEFINE_float('rl_batch_size_multiplier', 4.0,
                   'Validation batch = this x training batch.')
flags.DEFINE_float('rl_delay_steps_fraction', 0.25,
                   'Fraction of steps before the controller starts learning.')
flags.DEFINE_float('increase_ops_warmup_steps_fraction', 0.25,
                   'Fraction of steps of op warm-up (all ops on, decaying).')
flags.DEFINE_float('increase_filters_warmup_steps_fraction', 0.25,
                   'Fraction of steps of filter warm-up (widest, decaying).')
flags.DEFINE_float('rl_temperature', 1.0, 'Controller sampling temperature.')
flags.DEFINE_string('rl_reward_function', 'abs',
                    'Reward: ' + ', '.join(rewards.REGISTRY.names()))
flags.DEFINE_string('cost_model', 'pixel1_latency',
                    'Cost model: ' + ', '.join(cost_models.names()) +
                    f', or {_NONE} for plain accuracy.')
flags.DEFINE_float('rl_cost_model_target', None, 'Cost target (default: the '
                   "space's, 84 ms or 57 ms of simulated Pixel-1 latency).")
flags.DEFINE_float('rl_cost_model_exponent', -0.10,
                   'Cost exponent beta of the reward.')
# Execution.
flags.DEFINE_bool('use_bfloat16', False, 'Compute in bfloat16.')
flags.DEFINE_bool('use_gradient_sync_barrier', True,
                  'Compute all weight gradients before applying any, and '
                  'validate only after the weight update.')
flags.DEFINE_bool('use_tpu', False, 'Run on Cloud TPU (needs --tpu).')
flags.DEFINE_string('tpu', None, 'Cloud TPU name or grpc:// address.')
flags.DEFINE_string('tpu_zone', None, 'Cloud TPU zone.')
flags.DEFINE_string('gcp_project', None, 'Google Cloud project.')
flags.DEFINE_integer('num_replicas', None,
                     'TPU cores (default 8 with --use_tpu, else 1).')
flags.DEFINE_integer('tpu_iterations_per_loop', 100, 'Steps per host loop; '
                     'summaries are written this often.')
flags.DEFINE_integer('save_checkpoints_steps', None, 'Checkpoint interval '
                     '(default: every 5 host loops, and always at the end).')
flags.DEFINE_integer('keep_checkpoint_max', 5, 'Checkpoints kept.')
flags.DEFINE_integer('seed', None, 'Graph-level random seed.')
flags.DEFINE_float('constant_validation_accuracy', None,
                   'Testing aid: use this accuracy in the reward instead of '
                   'the measured one.')


def build_config() -> SearchConfig:
  """Validates the flags and turns them into a SearchConfig.

  Raises:
    cli.UsageError: for any bad value, with one line naming it.
  """
  if FLAGS.search_space in search_spaces.reference_names():
    raise cli.UsageError(
        f'{FLAGS.search_space!r} is a reference architecture, not a search '
        'space; train it with bin/train_eval.py. Search spaces: '
        + ', '.join(search_spaces.search_space_names()))
  space = cli.get_or_usage(search_spaces.get, FLAGS.search_space)
  try:
    info = cli.get_or_usage(
        lambda n: data.get_info(n, FLAGS.data_dir), FLAGS.dataset)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  if info.num_train is None and FLAGS.max_steps is None:
    raise cli.UsageError(f'the size of the training split of {FLAGS.dataset} '
                         'is unknown; give --max_steps instead of --epochs')
  if not FLAGS.model_dir:
    raise cli.UsageError('--model_dir is required')
  cost_model = FLAGS.cost_model
  if cost_model != _NONE:
    model = cli.get_or_usage(cost_models.get, cost_model, extra=[_NONE])
    if not model.applies(space.pixel1_model, space.spec()):
      raise cli.UsageError(f'cost model {cost_model!r} does not apply to '
                           f'{space.name}; use --cost_model=madds, params or '
                           f'{_NONE}')
  cli.get_or_usage(rewards.REGISTRY.get, FLAGS.rl_reward_function)
  target = FLAGS.rl_cost_model_target
  if target is None and cost_model == 'pixel1_latency':
    target = space.default_cost_target
  if target is None and cost_model not in (_NONE, 'pixel1_latency'):
    raise cli.UsageError(f'--cost_model={cost_model} needs '
                         '--rl_cost_model_target (no default for it)')
  use_tpu = FLAGS.use_tpu
  replicas = FLAGS.num_replicas or (8 if use_tpu else 1)
  if not use_tpu and replicas != 1:
    raise cli.UsageError(f'--num_replicas={replicas} needs --use_tpu; '
                         'CPU/GPU runs use one replica')
  if use_tpu and not FLAGS.tpu:
    raise cli.UsageError('--use_tpu needs --tpu=NAME (or a grpc:// address)')
  try:
    return SearchConfig(
        search_space=space.name, model_dir=FLAGS.model_dir,
        num_classes=info.num_classes,
        num_train_examples=info.num_train or 0,
        dataset=FLAGS.dataset, data_dir=FLAGS.data_dir,
        image_size=FLAGS.image_size or info.default_image_size,
        input_channels=info.channels,
        train_batch_size=FLAGS.train_batch_size, epochs=FLAGS.epochs,
        max_steps=FLAGS.max_steps,
        model_learning_rate=FLAGS.model_learning_rate,
        model_warmup_steps_fraction=FLAGS.model_warmup_steps_fraction,
        model_momentum=FLAGS.model_momentum,
        model_weight_decay=FLAGS.model_weight_decay,
        rl_learning_rate=FLAGS.rl_learning_rate,
        use_exponential_rl_learning_rate_schedule=(
            FLAGS.use_exponential_rl_learning_rate_schedule),
        rl_entropy_regularization=FLAGS.rl_entropy_regularization,
        rl_baseline_momentum=FLAGS.rl_baseline_momentum,
        rl_batch_size_multiplier=FLAGS.rl_batch_size_multiplier,
        rl_delay_steps_fraction=FLAGS.rl_delay_steps_fraction,
        rl_temperature=FLAGS.rl_temperature,
        increase_ops_warmup_steps_fraction=(
            FLAGS.increase_ops_warmup_steps_fraction),
        increase_filters_warmup_steps_fraction=(
            FLAGS.increase_filters_warmup_steps_fraction),
        rl_reward_function=FLAGS.rl_reward_function,
        cost_model=cost_model, cost_model_space=space.pixel1_model,
        rl_cost_model_target=target,
        rl_cost_model_exponent=FLAGS.rl_cost_model_exponent,
        constant_validation_accuracy=FLAGS.constant_validation_accuracy,
        use_bfloat16=FLAGS.use_bfloat16,
        use_gradient_sync_barrier=FLAGS.use_gradient_sync_barrier,
        use_tpu=use_tpu, tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone,
        gcp_project=FLAGS.gcp_project, num_replicas=replicas,
        tpu_iterations_per_loop=FLAGS.tpu_iterations_per_loop,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, seed=FLAGS.seed)
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None


def main(argv):
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = build_config()
  try:
    data.check_available(config.dataset, config.data_dir)
  except data.DataError as e:
    raise cli.UsageError(str(e)) from None
  # Import TensorFlow-heavy modules only once the flags are known to be good.
  from tunas_search import runner  # pylint: disable=g-import-not-at-top
  space = search_spaces.get(config.search_space)
  try:
    result = runner.run_search(config, space.spec())
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None
  except runner.NonFiniteLossError as e:
    cli.fail(str(e), exit_code=1)
  print(runner.format_result(result))


def run():
  cli.run(main)


if __name__ == '__main__':
  run()
