"""Runs a search end to end: model dir set-up, resume, training, the result."""

import dataclasses
import json
import os
import time
from typing import Any, Dict, List, Optional

from absl import logging
import tensorflow as tf

from tunas_search import analysis
from tunas_search import architecture
from tunas_search import config as config_lib
from tunas_search import controller
from tunas_search import data
from tunas_search import schema
from tunas_search import search
from tunas_search import serialization
from tunas_search import tpu
from tunas_search.config import SearchConfig

RESULT_FILENAME = 'search_result.json'


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or infinite; the run stopped."""


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """The architecture the controller prefers at the end of a search.

  Attributes:
    model_dir: where the search lives.
    step: global step of the checkpoint the logits were read from.
    indices: argmax of every decision's logits (SPEC.md section 7).
    architecture: `indices` as an architecture string.
    block_string: the pruned architecture as a block string.
    costs: estimated cost per applicable cost model.
    probabilities: per decision, the softmax of its logits.
  """
  model_dir: str
  step: int
  indices: List[int]
  architecture: str
  block_string: str
  costs: Dict[str, float]
  probabilities: List[List[float]]


def _latest_step(model_dir: str) -> int:
  checkpoint = tf.train.latest_checkpoint(model_dir)
  if not checkpoint:
    return 0
  return int(tf.train.load_checkpoint(checkpoint).get_tensor(
      tf.compat.v1.GraphKeys.GLOBAL_STEP))


def read_result(config: SearchConfig, model_spec: Any) -> SearchResult:
  """Reads the controller's preferred architecture from the checkpoint."""
  decisions = schema.decisions(model_spec)
  checkpoint = tf.train.latest_checkpoint(config.model_dir)
  if not checkpoint:
    raise config_lib.ConfigError(f'no checkpoint in {config.model_dir} yet')
  logits = controller.read_logit_values(checkpoint, decisions,
                                        search.CONTROLLER_SCOPE)
  indices = architecture.canonicalize(model_spec,
                                      controller.argmax_indices(logits))
  pruned = architecture.prune(model_spec, indices)
  return SearchResult(
      model_dir=config.model_dir, step=_latest_step(config.model_dir),
      indices=indices, architecture=architecture.format_indices(indices),
      block_string=architecture.block_string(pruned),
      costs=analysis.estimated_costs(config, model_spec, indices),
      probabilities=[[round(float(p), 4) for p in probs]
                     for probs in controller.probabilities(logits)])


def format_result(result: SearchResult) -> str:
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
               ) -> SearchResult:
  """Runs (or resumes) a search to `config.total_steps`.

  Args:
    config: the validated config.
    model_spec: the search space's spec.
    hooks: extra session hooks (tests use them to interrupt a run).

  Returns:
    The architecture the controller prefers at the end.

  Raises:
    ConfigError: if the model dir holds an incompatible search.
    NonFiniteLossError: if the loss stopped being finite.
  """
  resumed = config_lib.write_or_check(config,
                                      serialization.dumps(model_spec, indent=1))
  start = _latest_step(config.model_dir)
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
          f'{_latest_step(config.model_dir)}; the run stopped and the last '
          f'good checkpoint ({good or "none"}) is intact; lower '
          '--model_learning_rate and rerun to resume') from None
    logging.info('Search reached step %d in %s', total,
                 tpu.format_seconds(time.time() - began))
  result = read_result(config, model_spec)
  with tf.io.gfile.GFile(os.path.join(config.model_dir, RESULT_FILENAME),
                         'w') as f:
    f.write(json.dumps(dataclasses.asdict(result), indent=2))
  return result


def result_to_json(result: SearchResult) -> str:
  return json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True)
