"""Stand-alone training and evaluation of one architecture (docs/method.md section 7).

The same calls run on Cloud TPU and on CPU (`use_tpu=False`) through
TPUEstimator. A model dir holds `config.json` and the searched space's
`model_spec.json` (written and checked on resume by
`tunas_search.config.write_or_check`), checkpoints, TensorBoard events and
`eval_results_<split>.json` after each evaluation.
"""

import dataclasses
import json
import os
import time
from typing import Any, List, Optional, Tuple

from absl import logging
import tensorflow as tf

from tunas_search.results import analysis
from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search import data
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.space import serialization
from tunas_search.config import ConfigError
from tunas_search.runtime import estimators
from tunas_search.runtime import progress as progress_lib
from tunas_search.standalone import model_fn as model_fn_lib
from tunas_search.config.standalone import TrainEvalConfig
from tunas_search.standalone.warm_start import SearchWeights
from tunas_search.standalone.warm_start import WarmStartError

tf1 = tf.compat.v1
Hooks = Optional[List[tf1.train.SessionRunHook]]


@dataclasses.dataclass(frozen=True)
class EvalResult:
  """One evaluation of a checkpoint, as written to eval_results_<split>.json.

  Attributes:
    model_dir: the run's model dir.
    search_space: the space `architecture` indexes.
    architecture: the architecture string.
    block_string: the pruned architecture as a block string.
    global_step: the evaluated checkpoint's step.
    split: 'test' or 'validation'.
    num_examples: examples evaluated (a TPU drops the last partial batch).
    top_1_accuracy: fraction in [0, 1].
    top_5_accuracy: fraction in [0, 1].
    loss: mean cross-entropy (no label smoothing, no weight decay).
  """
  model_dir: str
  search_space: str
  architecture: str
  block_string: str
  global_step: int
  split: str
  num_examples: Optional[int]
  top_1_accuracy: float
  top_5_accuracy: float
  loss: float


def results_path(model_dir: str, split: str) -> str:
  return os.path.join(model_dir, f'eval_results_{split}.json')


def architecture_from_search(search_dir: str
                             ) -> Tuple[config_lib.SearchConfig, Any, str]:
  """The final architecture of a (possibly running) search (docs/method.md section 7).

  Returns:
    The search's config, its model spec and the canonical argmax
    architecture string of its latest checkpoint.

  Raises:
    analysis.AnalysisError: if the dir is not a search or has nothing yet.
  """
  search_config, spec = analysis.load_search(search_dir)
  return search_config, spec, analysis.analyze(search_dir).architecture


def load_run(model_dir: str) -> Tuple[TrainEvalConfig, Any]:
  """The config and model spec a train_eval run wrote at its start.

  Raises:
    ConfigError: if the dir holds no train_eval run.
  """
  gfile = tf.io.gfile
  paths = [os.path.join(model_dir, name) for name in (
      config_lib.CONFIG_FILENAME, config_lib.MODEL_SPEC_FILENAME)]
  for path in paths:
    if not gfile.exists(path):
      raise ConfigError(f'{model_dir} holds no train_eval run: it has no '
                        f'{os.path.basename(path)}')
  config = config_lib.load_existing(TrainEvalConfig, paths[0])
  with gfile.GFile(paths[1]) as f:
    return config, serialization.loads(f.read())


def _checked_indices(config: TrainEvalConfig, model_spec: Any) -> List[int]:
  try:
    return architecture.parse_indices(config.indices, model_spec)
  except architecture.ArchitectureError as e:
    raise ConfigError(f'indices: {e}') from None


def prepare(config: TrainEvalConfig, model_spec: Any,
            lock: Optional[model_dir_lib.Lock] = None,
            resume_from: Optional[str] = None) -> Optional[SearchWeights]:
  """Checks the run against its model dir and writes config/spec files.

  Args:
    config: the validated config.
    model_spec: the spec `config.indices` indexes.
    lock: the model dir's lock (`model_dir.exclusive`), acquired once the
      checks have passed; unfinished saves are then removed
      (`model_dir.remove_unfinished_saves`) before anything is written.
    resume_from: the checkpoint the run will continue from, if not the
      latest.

  Returns:
    The search to initialise from, if the run has one and model_dir has no
    checkpoint yet (a resumed run keeps its own weights).

  Raises:
    ConfigError: bad indices, an incompatible model dir, an evaluation of a
      model dir without a checkpoint, or a split the run would read that
      the dataset lacks (or, on TPU, an evaluation split of unknown size
      or smaller than one batch).
    WarmStartError: if `init_from_search` cannot initialise this network.
  """
  _checked_indices(config, model_spec)
  check_inputs(config)
  has_checkpoint = bool(model_dir_lib.restore_point(config.model_dir,
                                                    resume_from))
  if config.mode == 'evaluate' and not has_checkpoint:
    raise ConfigError(f'nothing to evaluate: {config.model_dir} has no '
                      'checkpoint; train first (--mode=train_and_eval)')
  weights = None
  if config.init_from_search and not has_checkpoint:
    # Checked before anything is written, so a bad dir leaves no trace.
    weights = SearchWeights.open(config.init_from_search, model_spec,
                                 config.num_classes, config.input_channels)
  spec_json = serialization.dumps(model_spec, indent=1)
  config_lib.check_resume(config, spec_json)
  if lock is not None:
    lock.acquire()  # Creates a new model dir: the checks have passed.
    # Before any write: a rerun on a disk that is still full frees the
    # killed save's space first.
    model_dir_lib.remove_unfinished_saves(lock)
  config_lib.write_or_check(config, spec_json)
  return weights


def check_inputs(config: TrainEvalConfig) -> None:
  """Refuses a run whose training or evaluation split cannot be read, before
  it trains: an evaluation that fails after hours of training loses them.

  Raises:
    ConfigError: naming the split, the dataset's splits and what to do.
  """
  needed = {'train': [config.train_split], 'evaluate': [config.eval_split],
            'train_and_eval': [config.train_split, config.eval_split]}
  try:
    data.check_splits(config.dataset, config.data_dir, needed[config.mode])
  except data.DataError as e:
    raise ConfigError(f'{config.mode} reads {" and ".join(needed[config.mode])}'
                      f': {e}') from None
  if config.use_tpu and config.mode != 'train':
    size = data.get_info(config.dataset, config.data_dir).num_examples(
        config.eval_split)
    if size is None or size < config.eval_batch_size:
      raise ConfigError(
          f'the {config.eval_split} split of {config.dataset} has '
          f'{"an unknown number of" if size is None else size} examples; a '
          f'TPU evaluates whole batches of eval_batch_size '
          f'{config.eval_batch_size}, so it needs a known size of at least '
          'one batch')


def _estimator(config: TrainEvalConfig, model_spec: Any,
               weights: Optional[SearchWeights]):
  # No estimator saver: `_train_to` passes `model_dir.CheckpointSaver`.
  run_config = estimators.make_run_config(
      config.model_dir, config.use_tpu, config.tpu_iterations_per_loop,
      config.num_replicas, None, config.keep_checkpoint_max, config.tpu,
      config.tpu_zone, config.gcp_project, config.seed,
      has_gpu=bool(tf.config.list_physical_devices('GPU')))
  return estimators.make_estimator(
      model_fn_lib.make_model_fn(config, model_spec, weights), run_config,
      config.use_tpu, config.train_batch_size,
      eval_batch_size=config.eval_batch_size)


def _input_fn(config: TrainEvalConfig, is_training: bool):
  return data.ClassifierInputFn(
      config.dataset, config.data_dir,
      config.train_split if is_training else config.eval_split,
      config.image_size, is_training=is_training, seed=config.seed,
      transpose_input=config.use_tpu,
      # Static batch shapes on TPU; on CPU every example is evaluated.
      drop_remainder=config.use_tpu)


def _train_to(estimator, config: TrainEvalConfig, step: int,
              hooks: Hooks) -> None:
  total = config.total_steps
  log_every = config.log_every_steps or max(1, min(
      config.tpu_iterations_per_loop, total // 20 or 1))
  progress = progress_lib.ProgressHook(total, config.train_batch_size,
                                       log_every, label='train_eval')
  # The graph goes into the events once, on a run's first start.
  saver = model_dir_lib.CheckpointSaver(
      config.model_dir, config.iterations_per_checkpoint,
      write_graph=progress_lib.latest_step(config.model_dir) == 0,
      steps_per_run=config.tpu_iterations_per_loop if config.use_tpu else 1)
  estimator.train(_input_fn(config, True), max_steps=step,
                  hooks=[saver, progress] + list(hooks or []))


def _evaluate(estimator, config: TrainEvalConfig,
              model_spec: Any) -> EvalResult:
  """Evaluates the latest checkpoint and writes eval_results_<split>.json."""
  input_fn = _input_fn(config, False)
  size = input_fn.info.num_examples(config.eval_split)
  steps = None
  if config.use_tpu:  # `check_inputs`: a known size, at least one batch.
    steps = size // config.eval_batch_size
    size = steps * config.eval_batch_size
  metrics = estimator.evaluate(input_fn, steps=steps, name=config.eval_split)
  indices = _checked_indices(config, model_spec)
  result = EvalResult(
      model_dir=config.model_dir, search_space=config.search_space,
      architecture=config.indices,
      block_string=architecture.block_string(architecture.prune(model_spec,
                                                                indices)),
      global_step=int(metrics['global_step']), split=config.eval_split,
      num_examples=size,
      top_1_accuracy=float(metrics['top_1_accuracy']),
      top_5_accuracy=float(metrics['top_5_accuracy']),
      loss=float(metrics['loss']))
  model_dir_lib.write_text(results_path(config.model_dir, config.eval_split),
                           result_to_json(result))
  logging.info('Evaluation at step %d on %s: top-1 %.4f, top-5 %.4f, loss '
               '%.4f', result.global_step, result.split,
               result.top_1_accuracy, result.top_5_accuracy, result.loss)
  return result


def run(config: TrainEvalConfig, model_spec: Any, hooks: Hooks = None,
        resume_from: Optional[str] = None) -> Optional[EvalResult]:
  """Trains and/or evaluates as `config.mode` says; resumes from model_dir.

  'train' trains to `config.total_steps`; 'evaluate' evaluates the latest
  checkpoint; 'train_and_eval' trains in chunks of `config.steps_per_eval`
  steps (one chunk without it), evaluating after each.

  Args:
    config: the validated config.
    model_spec: the spec `config.indices` indexes.
    hooks: extra training session hooks (tests read losses with them).
    resume_from: a checkpoint of the model dir to continue from instead of
      the latest (e.g. the newest intact one when the latest is damaged).

  Returns:
    The last evaluation, or None for 'train'.

  Raises:
    ConfigError: bad indices, incompatible model dir, nothing to evaluate,
      a split to read that the dataset lacks (`check_inputs`);
      `model_dir.ModelDirError` (a ConfigError) if another run holds the
      model dir or its checkpoints are damaged. Nothing is written then.
    WarmStartError: if `init_from_search` cannot initialise the network.
    model_dir.DiskFullError: if a write failed for lack of disk space; the
      checkpoints recorded before stay intact and a rerun resumes.
  """
  with model_dir_lib.exclusive(config.model_dir) as lock:
    # Everything is checked before anything is written.
    model_dir_lib.check(config.model_dir, resume_from)
    with model_dir_lib.stopping_on_full_disk(config.model_dir):
      weights = prepare(config, model_spec, lock, resume_from)
      lock.record_holder()
      model_dir_lib.prepare_restore(config.model_dir, resume_from)
      with model_dir_lib.naming_missing_variables(config.model_dir):
        return _run_locked(config, model_spec, weights, hooks)


def _run_locked(config: TrainEvalConfig, model_spec: Any,
                weights: Optional[SearchWeights],
                hooks: Hooks) -> Optional[EvalResult]:
  estimator = _estimator(config, model_spec, weights)
  if config.mode == 'evaluate':
    return _evaluate(estimator, config, model_spec)
  start, total = progress_lib.latest_step(config.model_dir), config.total_steps
  logging.info('%s training of %s in %s: step %d of %d%s', 'Resuming' if start
               else 'Starting', config.indices, config.model_dir, start,
               total, f' from search {weights.checkpoint}' if weights else '')
  began = time.time()
  result = None
  chunk = config.steps_per_eval or total
  step = start
  while step < total or (result is None and config.mode != 'train'):
    step = min(total, (step // chunk + 1) * chunk)
    if progress_lib.latest_step(config.model_dir) < step:
      _train_to(estimator, config, step, hooks)
    if config.mode == 'train_and_eval':
      result = _evaluate(estimator, config, model_spec)
  logging.info('Reached step %d in %s', total,
               progress_lib.format_seconds(time.time() - began))
  return result


def result_to_json(result: EvalResult) -> str:
  return json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True)


def format_result(result: EvalResult) -> str:
  """A short human-readable report of an evaluation."""
  return '\n'.join([
      f'Evaluation of {result.search_space} at step {result.global_step} '
      f'on {result.split} ({result.num_examples} images) in '
      f'{result.model_dir}',
      f'  architecture:   {result.architecture}',
      f'  blocks:         {result.block_string}',
      f'  top-1 accuracy: {result.top_1_accuracy:.4f}',
      f'  top-5 accuracy: {result.top_5_accuracy:.4f}',
      f'  loss:           {result.loss:.4f}',
      f'  details:        {results_path(result.model_dir, result.split)}',
  ])


__all__ = ['EvalResult', 'TrainEvalConfig', 'WarmStartError', 'ConfigError',
           'architecture_from_search', 'load_run', 'prepare', 'run',
           'results_path', 'result_to_json', 'format_result']
