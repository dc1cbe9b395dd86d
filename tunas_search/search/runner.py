"""Runs a search end to end: model dir set-up, resume, training, the result."""

import json
import os
import time
from typing import Any, Callable, List, Optional

from absl import logging
import tensorflow as tf

from tunas_search.results import analysis
from tunas_search import config as config_lib
from tunas_search.controller import policy as controller
from tunas_search import cost_models
from tunas_search import data
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.results import render as report
from tunas_search.search import model_fn as search
from tunas_search.results import selection
from tunas_search.space import serialization
from tunas_search.results import summaries
from tunas_search.config import plan as plan_lib
from tunas_search.config import SearchConfig
from tunas_search.runtime import estimators
from tunas_search.runtime import progress as progress_lib
from tunas_search.runtime import xla

tf1 = tf.compat.v1

RESULT_FILENAME = 'search_result.json'


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or infinite; the run stopped.

  The message is one line: the step, the newest all-finite checkpoint and how
  to resume from it.
  """


def format_result(result: analysis.Analysis) -> str:
  """A short human-readable report of a search result (`report`)."""
  return report.format_summary(
      result, os.path.join(result.model_dir, RESULT_FILENAME))


def _mirrored(config: SearchConfig) -> Optional[estimators.Mirrored]:
  """The strategy of a search over several local devices, else None."""
  if config.use_tpu or (config.num_replicas == 1 and not config.multi_worker):
    return None
  try:
    if config.multi_worker:
      return estimators.multi_worker_strategy(config.num_replicas)
    return estimators.mirrored_strategy(config.num_replicas)
  except ValueError as e:
    raise config_lib.ConfigError(str(e)) from None


def probe_environment() -> plan_lib.Environment:
  """What this machine offers a search step: the one place that looks."""
  return plan_lib.Environment(
      has_gpu=bool(tf.config.list_physical_devices('GPU')))


def _make_estimator(config: SearchConfig, plan: plan_lib.StepPlan,
                    environment: plan_lib.Environment, model_spec: Any,
                    mirrored: Optional[estimators.Mirrored],
                    make_model_fn: Callable = search.make_model_fn):
  # No estimator saver: `_checkpoint_saver` replaces it.
  run_config = estimators.make_run_config(
      config.model_dir, config.use_tpu, config.tpu_iterations_per_loop,
      config.num_replicas, None, config.keep_checkpoint_max, config.tpu,
      config.tpu_zone, config.gcp_project, config.seed, mirrored,
      search_graph=True, has_gpu=environment.has_gpu)
  model_fn = make_model_fn(
      config, plan, model_spec,
      write_summaries=mirrored is None or mirrored.is_chief)
  return estimators.make_estimator(model_fn,
                                   run_config, config.use_tpu,
                                   config.train_batch_size)


def _checkpoint_saver(config: SearchConfig,
                      write_graph: bool) -> model_dir_lib.CheckpointSaver:
  """The search's checkpoint saver; the estimator's own would write the
  graph into the events on every start."""
  # A session run is a whole host loop on TPU.
  return model_dir_lib.CheckpointSaver(
      config.model_dir, config.iterations_per_checkpoint, write_graph,
      steps_per_run=config.tpu_iterations_per_loop if config.use_tpu else 1)


def search_input_fn(config: SearchConfig, training_stream: bool = True
                    ) -> data.SearchInputFn:
  """The input function of a search: training and validation batches.

  Without `training_stream` (a retarget) the training batches are empty and
  the training split is not read; the validation batches are the same.
  """
  return data.SearchInputFn(
      config.dataset, config.data_dir, config.image_size,
      validation_batch_multiplier=int(config.rl_batch_size_multiplier),
      transpose_input=config.use_tpu, seed=config.seed,
      training_stream=training_stream)


def non_finite_loss_error(model_dir: str,
                          steps: progress_lib.StepTracker
                          ) -> NonFiniteLossError:
  """The one-line error for a run stopped by a non-finite loss.

  If the newest checkpoint holds NaN or inf, this also rewinds the checkpoint
  state to the newest all-finite one (`resume_from`), so that rerunning the
  same command resumes from a good state instead of failing again at once.

  Args:
    model_dir: the run's model directory.
    steps: the tracker that saw the failed session run.
  """
  first, last = steps.last_run_steps or (0, 0)
  where = (f'at step {last}' if first == last else
           f'near step {last} (TPU host loop of steps {first}-{last})')
  lower = 'a lower --model_learning_rate (or --rl_learning_rate)'
  good = model_dir_lib.newest_intact(model_dir, require_finite=True)
  latest = tf.train.latest_checkpoint(model_dir)
  if good is None and latest is None:
    advice = (f'no checkpoint was written; rerun the same command with '
              f'{lower} to start over')
  elif good is None:
    advice = (f'no checkpoint in {model_dir} is all finite; rerun with a new '
              f'--model_dir and {lower}')
  else:
    note = ''
    if good != latest:
      model_dir_lib.resume_from(model_dir, good)
      note = ' (newer checkpoints hold NaN or inf; a rerun skips them)'
    advice = (f'newest all-finite checkpoint: {good}{note}; rerun the same '
              f'command with {lower} to resume from it')
  return NonFiniteLossError(f'the loss became NaN or infinite {where}; '
                            f'{advice}')


def _train(config: SearchConfig, plan: plan_lib.StepPlan,
           environment: plan_lib.Environment, model_spec: Any,
           input_fn: Callable, hooks: List[tf1.train.SessionRunHook],
           write_graph: bool, mirrored: Optional[estimators.Mirrored],
           make_model_fn: Callable = search.make_model_fn) -> None:
  """Trains from the latest checkpoint to `config.total_steps`."""
  total = config.total_steps
  log_every = config.log_every_steps or max(1, min(
      config.tpu_iterations_per_loop, total // 20 or 1))
  progress = progress_lib.ProgressHook(total, config.train_batch_size,
                                       log_every)
  steps = progress_lib.StepTracker(
      config.tpu_iterations_per_loop if config.use_tpu else 1, total)
  began = time.time()
  logging.info('Building the search graph (about a minute on a CPU for a '
               'full space); progress is logged every %d steps', log_every)
  if plan.compiled_by_model_fn:
    logging.info('step_build=xla: XLA compiles the step on its first run '
                 '(minutes for a full space)')
    if not environment.has_gpu:
      # XLA's CPU backend compiles a full space's step in minutes only with
      # these LLVM options (docs/xla.md); a GPU's kernels need its inlining.
      # Read at the process's first XLA compile, which is still to come.
      xla.use_cpu_compile_options()
  chief = mirrored is None or mirrored.is_chief
  # The saver runs first, so a checkpoint due at a step is written before
  # any later hook can stop the run. Only the chief writes the model dir.
  hooks = ([_checkpoint_saver(config, write_graph)] if chief else []) + [
      progress, steps] + hooks
  replicas = 1 if config.use_tpu else config.num_replicas
  input_fn = estimators.per_replica_input_fn(
      input_fn, replicas, *((mirrored.worker, mirrored.num_workers)
                            if mirrored else ()))
  estimator = _make_estimator(config, plan, environment, model_spec,
                              mirrored, make_model_fn)
  try:
    with model_dir_lib.naming_missing_variables(config.model_dir):
      if mirrored is not None and mirrored.num_workers > 1:
        # The estimator runs several workers only through train_and_evaluate;
        # without an evaluator task in the cluster nothing is evaluated.
        tf.estimator.train_and_evaluate(
            estimator,
            tf.estimator.TrainSpec(input_fn, max_steps=total, hooks=hooks,
                                   saving_listeners=[
                                       progress_lib.CheckpointLogger()]),
            tf.estimator.EvalSpec(input_fn))
      else:
        estimator.train(input_fn, max_steps=total, hooks=hooks,
                        saving_listeners=[progress_lib.CheckpointLogger()])
  except tf1.train.NanLossDuringTrainingError:
    # The model_fn reports NaN whenever either loss is NaN or +-inf.
    if not chief:
      raise NonFiniteLossError(
          f'the loss became NaN or infinite on worker {mirrored.worker}; the '
          'chief (worker 0) names the checkpoint to resume from') from None
    raise non_finite_loss_error(config.model_dir, steps) from None
  logging.info('Search reached step %d in %s', total,
               progress_lib.format_seconds(time.time() - began))


def run_search(config: SearchConfig, model_spec: Any,
               hooks: Optional[List[tf1.train.SessionRunHook]] = None,
               input_fn: Optional[Callable] = None,
               resume_from: Optional[str] = None,
               environment: Optional[plan_lib.Environment] = None,
               make_model_fn: Callable = search.make_model_fn
               ) -> Optional[analysis.Analysis]:
  """Runs (or resumes) a search to `config.total_steps`.

  Args:
    config: the validated config.
    model_spec: the search space's spec.
    hooks: extra session hooks (tests use them to interrupt a run).
    input_fn: the TPUEstimator input function; default:
      `search_input_fn(config)` (tests wrap it to inject faults).
    resume_from: a checkpoint of the model dir to continue from instead of
      the latest (e.g. the newest intact one when the latest is damaged).
      Unfinished saves of killed runs are removed first, before anything is
      written (one log line, `model_dir.remove_unfinished_saves`).
    environment: what the machine offers the step; default: probed
      (`probe_environment`).
    make_model_fn: builds the step's model_fn from (config, plan, spec,
      write_summaries); a retarget's (search/retarget.py) replaces the
      search's.

  Returns:
    The architecture the controller prefers at the end (argmax of its
    logits, docs/method.md section 7), as `analyze_search` reports it; None
    on a multi-worker search's non-chief workers, which write nothing.

  Raises:
    ConfigError: if the model dir holds an incompatible search;
      `model_dir.ModelDirError` (a ConfigError) if another run holds it or
      its checkpoints are damaged. Nothing is written then.
    NonFiniteLossError: if either loss became NaN or +-inf; the newest
      all-finite checkpoint is then the one a rerun resumes from.
    model_dir.DiskFullError: if a write failed for lack of disk space; the
      checkpoints recorded before stay intact and a rerun resumes.
  """
  mirrored = _mirrored(config)  # Before anything is written.
  environment = environment or probe_environment()
  if mirrored is not None and not mirrored.is_chief:
    return _run_worker(config, model_spec, hooks, input_fn, mirrored,
                       environment)
  with model_dir_lib.exclusive(config.model_dir) as lock:
    # Everything is checked before anything is written.
    model_dir_lib.check(config.model_dir, resume_from)
    _check_logits_layout(config.model_dir, resume_from)
    # The step's form, every 'auto' resolved once (a resumed run keeps its
    # shared-weight update).
    plan = plan_lib.resolve(config, environment,
                            plan_lib.previous(config.model_dir, environment))
    spec_json = serialization.dumps(model_spec, indent=1)
    config_lib.check_resume(config, spec_json)
    with model_dir_lib.stopping_on_full_disk(config.model_dir):
      return _run_locked(config, plan, environment, model_spec, spec_json,
                         hooks, input_fn, resume_from, lock, mirrored,
                         make_model_fn)


def _run_locked(config: SearchConfig, plan: plan_lib.StepPlan,
                environment: plan_lib.Environment, model_spec: Any,
                spec_json: str,
                hooks: Optional[List[tf1.train.SessionRunHook]],
                input_fn: Optional[Callable], resume_from: Optional[str],
                lock: model_dir_lib.Lock,
                mirrored: Optional[estimators.Mirrored],
                make_model_fn: Callable = search.make_model_fn
                ) -> analysis.Analysis:
  """`run_search` once the checks have passed: writes, trains, reports."""
  lock.acquire()  # Creates a new model dir: the checks have passed.
  # First frees what a killed save left, so that a rerun on a disk that is
  # still full has the space to write.
  model_dir_lib.remove_unfinished_saves(lock)
  resumed = config_lib.write_or_check(config, spec_json)
  plan_lib.write(plan, config.model_dir)
  lock.record_holder()
  model_dir_lib.prepare_restore(config.model_dir, resume_from)
  summaries.write_layout(config, model_spec)  # TensorBoard's Custom Scalars.
  start = progress_lib.latest_step(config.model_dir)
  logging.info('%s search of %s in %s: step %d of %d (%d images per step)',
               'Resuming' if resumed else 'Starting', config.search_space,
               config.model_dir, start, config.total_steps,
               config.train_batch_size)
  logging.info('%s', plan.describe())
  if start < config.total_steps:
    # The graph goes into the events once, on a run's first start.
    _train(config, plan, environment, model_spec,
           input_fn or search_input_fn(config), list(hooks or []),
           write_graph=start == 0 and not resumed, mirrored=mirrored,
           make_model_fn=make_model_fn)
  return _write_result(config, model_spec)


def _check_logits_layout(model_dir: str,
                         resume_from: Optional[str] = None) -> None:
  """Refuses a checkpoint to restore whose controller logits are one
  variable per decision (written before they were grouped): a search could
  not restore it, but `analyze_search` still reads it."""
  checkpoint = model_dir_lib.restore_point(model_dir, resume_from)
  if checkpoint and controller.has_legacy_logits(checkpoint):
    raise config_lib.ConfigError(
        f'checkpoint {checkpoint} stores one controller logits variable '
        'per decision, the layout of older tunas_search versions, which this '
        'version cannot resume; analyze_search still reads it, or search '
        'again with a new --model_dir')


def _run_worker(config: SearchConfig, model_spec: Any,
                hooks: Optional[List[tf1.train.SessionRunHook]],
                input_fn: Optional[Callable],
                mirrored: estimators.Mirrored,
                environment: plan_lib.Environment) -> None:
  """A multi-worker search's non-chief worker: trains, writes nothing.

  The chief locks, checks and writes the model dir; this worker restores
  from it like the chief and computes its replicas' share of every step,
  whose plan it resolves as the chief does (several replicas: every weight
  is stepped every step).
  """
  logging.info('Worker %d of %d of the search in %s', mirrored.worker,
               mirrored.num_workers, config.model_dir)
  _train(config, plan_lib.resolve(config, environment), environment,
         model_spec, input_fn or search_input_fn(config), list(hooks or []),
         write_graph=False, mirrored=mirrored)


def _write_result(config: SearchConfig, model_spec: Any) -> analysis.Analysis:
  """Analyses the finished search and writes search_result.json.

  Besides the argmax (TuNAS's result), the file holds `final_architecture`:
  what `selection`'s default rule returns and how settled the controller is
  (docs/evaluate_search.md, "Landing on the target").
  """
  result = analysis.analyze(config.model_dir)
  choice = selection.for_search(config, model_spec, result).choose(
      selection.AUTO)
  logging.info('%s', selection.format_text(choice, _unit(config)))
  model_dir_lib.write_text(
      os.path.join(config.model_dir, RESULT_FILENAME),
      json.dumps(dict(result.to_dict(), final_architecture=choice.to_dict()),
                 indent=2))
  return result


def _unit(config: SearchConfig) -> str:
  if config.cost_model == cost_models.NONE:
    return ''
  return cost_models.get(config.cost_model).unit
