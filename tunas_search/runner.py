"""Runs a search end to end: model dir set-up, resume, training, the result."""

import json
import os
import time
from typing import Any, List, Optional

from absl import logging
import tensorflow as tf

from tunas_search import analysis
from tunas_search import config as config_lib
from tunas_search import data
from tunas_search import search
from tunas_search import serialization
from tunas_search import tpu
from tunas_search.config import SearchConfig

RESULT_FILENAME = 'search_result.json'


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or infinite; the run stopped."""


def format_result(result: analysis.Analysis) -> str:
  """A short human-readable report of a search result."""
  costs = ', '.join(f'{k}={v:.4g}' for k, v in sorted(result.costs.items()))
  return '\n'.join([
      f'Search at step {result.step} in {result.model_dir}',
      f'  architecture: {result.architecture}',
      f'  blocks:       {result.block_string}',
      f'  costs:        {costs}',
      f'  details:      {os.path.join(result.model_dir, RESULT_FILENAME)}',
      f'  inspect:      tensorboard --logdir={result.model_dir}',
      f'  next:         bin/analyze_search.py --model_dir={result.model_dir}',
  ])


def _make_estimator(config: SearchConfig, model_spec: Any):
  run_config = tpu.make_run_config(
      config.model_dir, config.use_tpu, config.tpu_iterations_per_loop,
      config.num_replicas, config.iterations_per_checkpoint,
      config.keep_checkpoint_max, config.tpu, config.tpu_zone,
      config.gcp_project, config.seed)
  return tpu.make_estimator(search.make_model_fn(config, model_spec),
                            run_config, config.use_tpu,
                            config.train_batch_size)


def _input_fn(config: SearchConfig):
  return data.SearchInputFn(
      config.dataset, config.data_dir, config.image_size,
      validation_batch_multiplier=int(config.rl_batch_size_multiplier),
      transpose_input=config.use_tpu, seed=config.seed)


def run_search(config: SearchConfig, model_spec: Any,
               hooks: Optional[List[tf.compat.v1.train.SessionRunHook]] = None
               ) -> analysis.Analysis:
  """Runs (or resumes) a search to `config.total_steps`.

  Args:
    config: the validated config.
    model_spec: the search space's spec.
    hooks: extra session hooks (tests use them to interrupt a run).

  Returns:
    The architecture the controller prefers at the end (argmax of its
    logits, SPEC.md section 7), as `analyze_search` reports it.

  Raises:
    ConfigError: if the model dir holds an incompatible search.
    NonFiniteLossError: if the loss stopped being finite.
  """
  resumed = config_lib.write_or_check(config,
                                      serialization.dumps(model_spec, indent=1))
  start = tpu.latest_step(config.model_dir)
  total = config.total_steps
  logging.info('%s search of %s in %s: step %d of %d (%d images per step)',
               'Resuming' if resumed else 'Starting', config.search_space,
               config.model_dir, start, total, config.train_batch_size)
  if start < total:
    log_every = config.log_every_steps or max(1, min(
        config.tpu_iterations_per_loop, total // 20 or 1))
    progress = tpu.ProgressHook(total, config.train_batch_size, log_every)
    began = time.time()
    logging.info('Building the search graph (about a minute on a CPU for a '
                 'full space); progress is logged every %d steps', log_every)
    try:
      _make_estimator(config, model_spec).train(
          _input_fn(config), max_steps=total,
          hooks=[progress] + list(hooks or []),
          saving_listeners=[tpu.CheckpointLogger()])
    except tf.compat.v1.train.NanLossDuringTrainingError:
      good = tf.train.latest_checkpoint(config.model_dir)
      raise NonFiniteLossError(
          f'the loss became NaN or infinite near step '
          f'{tpu.latest_step(config.model_dir)}; the run stopped and the last '
          f'good checkpoint ({good or "none"}) is intact; lower '
          '--model_learning_rate and rerun to resume') from None
    logging.info('Search reached step %d in %s', total,
                 tpu.format_seconds(time.time() - began))
  result = analysis.analyze(config.model_dir)
  with tf.io.gfile.GFile(os.path.join(config.model_dir, RESULT_FILENAME),
                         'w') as f:
    f.write(json.dumps(result.to_dict(), indent=2))
  return result

