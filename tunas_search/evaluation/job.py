"""Runs a search evaluation: one-shot scores, stand-alone trainings, the report.

Layout of the output dir (every file written atomically):
  config.json, plan.json        the evaluation and its candidates (`plan`)
  one_shot/<candidate>.json     one-shot accuracy under every supernet
  train/<candidate>/run-<r>/    one train_eval model dir per training
  results/<candidate>/run-<r>.json   its validation and test accuracy
  evaluation.json, evaluation.txt, evaluation.png   the report (`report`)

Rerunning continues where the last run stopped: finished work is skipped and
a training resumes from its last checkpoint. With `num_shards` > 1 each
shard does every n-th one-shot score and training and writes only those
files; the report is then written by a run with `report_only`.
"""

import dataclasses
import json
import os
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search import data
from tunas_search.standalone import train_eval
from tunas_search.evaluation import candidates as candidates_lib
from tunas_search.evaluation import figure
from tunas_search.evaluation import one_shot
from tunas_search.evaluation import worklist as plan_lib
from tunas_search.evaluation import report
from tunas_search.evaluation.candidates import Candidate
from tunas_search.config.evaluation import CONFIG_FILENAME, EvaluationConfig
from tunas_search.evaluation.worklist import EvaluationError, Plan, Search
from tunas_search.runtime import progress
from tunas_search.standalone import TrainEvalConfig

gfile = tf.io.gfile
# Stand-alone checkpoints kept per training: the latest to resume from, and
# one before it in case the latest is damaged.
KEEP_CHECKPOINTS = 2


def temporary_name(path: str) -> str:
  """A name next to `path` that no other process writes (two machines may
  report at once)."""
  return f'{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}'


def write_atomically(path: str, text: str) -> None:
  """Writes `path` through a temporary file: whole or unchanged."""
  gfile.makedirs(os.path.dirname(path))
  temporary = temporary_name(path)
  with gfile.GFile(temporary, 'w') as f:
    f.write(text)
  gfile.rename(temporary, path, overwrite=True)


def read_json(path: str) -> Optional[Any]:
  """The JSON a file holds, None if there is no such file."""
  if not gfile.exists(path):
    return None
  with gfile.GFile(path) as f:
    return json.loads(f.read())


def one_shot_path(output_dir: str, candidate: Candidate) -> str:
  return os.path.join(output_dir, 'one_shot', f'{candidate.id}.json')


def train_dir(output_dir: str, candidate: Candidate, run: int) -> str:
  return os.path.join(output_dir, 'train', candidate.id, f'run-{run}')


def result_path(output_dir: str, candidate: Candidate, run: int) -> str:
  return os.path.join(output_dir, 'results', candidate.id, f'run-{run}.json')


def _stored_config(output_dir: str) -> Optional[EvaluationConfig]:
  path = os.path.join(output_dir, CONFIG_FILENAME)
  if not gfile.exists(path):
    return None
  with gfile.GFile(path) as f:
    text = f.read()
  try:
    return EvaluationConfig.from_json(text)
  except (config_lib.ConfigError, TypeError) as e:
    raise EvaluationError(f'{output_dir} holds another kind of run: '
                          f'{CONFIG_FILENAME}: {str(e).splitlines()[0]}'
                          ) from None


def _runtime(config: EvaluationConfig, stored: EvaluationConfig
             ) -> EvaluationConfig:
  """`stored` with this run's runtime fields (where things are, the shard)."""
  return dataclasses.replace(stored, **{
      k: getattr(config, k) for k in (
          'output_dir', 'data_dir', 'use_tpu', 'tpu', 'tpu_zone',
          'gcp_project', 'num_replicas', 'tpu_iterations_per_loop',
          'shard_index', 'num_shards', 'report_only', 'bootstrap_resamples',
          'decisive_difference')}
      | {'search_model_dirs': config.search_model_dirs
         or stored.search_model_dirs})


def prepare(config: EvaluationConfig
            ) -> Tuple[EvaluationConfig, Plan, List[Search]]:
  """Checks the input and makes or reads the plan; writes it if new.

  Returns:
    The config to run (the stored one, with this run's runtime fields), the
    plan and the searches (none for `report_only`).

  Raises:
    EvaluationError: for bad input; nothing is written then.
  """
  stored = _stored_config(config.output_dir)
  if config.report_only:
    existing = plan_lib.read(config.output_dir) if stored else None
    if existing is None:
      raise EvaluationError(f'{config.output_dir} holds no evaluation to '
                            'report yet')
    return _runtime(config, stored), existing, []
  searches = [plan_lib.load_search(d) for d in config.search_model_dirs]
  plan_lib.check_agree(searches)
  config = resolve_defaults(config, searches[0])
  if stored is not None:
    changed = config.incompatibilities(stored)
    if changed:
      name, (old, new) = next(iter(changed.items()))
      raise EvaluationError(
          f'{config.output_dir} holds an evaluation with {name}={old!r}, '
          f'not {new!r}; use another --output_dir or the same settings')
    config = _runtime(config, stored)
  first = searches[0].config
  try:
    data.check_available(first.dataset, config.data_dir or first.data_dir)
  except data.DataError as e:
    raise EvaluationError(str(e)) from None
  existing = plan_lib.read(config.output_dir) if stored else None
  if existing is None:
    text = plan_lib.make(config, searches).to_json()
    existing = Plan.from_json(text)  # As every later run reads it.
    _check_inputs(config, searches[0], existing.candidates[0])
    # The plan first: a config.json means its plan is complete.
    write_atomically(os.path.join(config.output_dir, plan_lib.PLAN_FILENAME),
                     text)
    write_atomically(os.path.join(config.output_dir, CONFIG_FILENAME),
                     config.to_json())
  else:
    _check_inputs(config, searches[0], existing.candidates[0])
  return config, existing, searches


def resolve_defaults(config: EvaluationConfig, search: Search
                     ) -> EvaluationConfig:
  """The config with the searches' own batch size where none was given.

  The stand-alone recipe then fits the searches' data and machine (their
  image size is always theirs), not TuNAS's ImageNet batch of 4096.
  """
  if config.train_batch_size is None:
    config = dataclasses.replace(
        config, train_batch_size=search.config.train_batch_size)
  return config


def describe_recipe(config: EvaluationConfig, search: Search,
                    candidate: Candidate) -> str:
  """One line saying which stand-alone recipe runs (for the log)."""
  train = training_config(config, search, candidate, 0)
  s = search.config
  batch = ("the searches' own" if config.train_batch_size ==
           s.train_batch_size else 'given')
  steps = ('--train_steps' if config.train_steps is not None else
           f'{config.epochs:g} epochs of {s.num_train_examples} images')
  return (f'stand-alone recipe: batch {config.train_batch_size} ({batch}), '
          f'image size {s.image_size} (the searches\'), {train.total_steps} '
          f'steps ({steps}), learning rate {config.model_learning_rate:g} per '
          f'256 images ({train.scaled_model_learning_rate:.4g} at this '
          f'batch), {config.seeds} seed(s) per candidate')


def _check_inputs(config: EvaluationConfig, search: Search,
                  candidate: Candidate) -> None:
  """Refuses splits the trainings could not read (train, validation,
  test), before anything is written or trained (`train_eval.check_inputs`).
  """
  train = training_config(config, search, candidate, 0)
  try:
    for run_config in (train, test_config(train)):
      train_eval.check_inputs(run_config)
  except config_lib.ConfigError as e:
    raise EvaluationError(str(e)) from None


def training_config(config: EvaluationConfig, search: Search,
                    candidate: Candidate, run: int) -> TrainEvalConfig:
  """The stand-alone run of one candidate: the same recipe for every one."""
  s = search.config
  return TrainEvalConfig(
      search_space=s.search_space,
      model_dir=train_dir(config.output_dir, candidate, run),
      num_classes=s.num_classes, num_train_examples=s.num_train_examples,
      indices=candidate.architecture, mode='train_and_eval',
      train_split='train', eval_split='validation', dataset=s.dataset,
      data_dir=config.data_dir or s.data_dir, image_size=s.image_size,
      input_channels=s.input_channels, class_names=s.class_names,
      train_batch_size=config.train_batch_size, epochs=config.epochs,
      max_steps=config.train_steps,
      model_learning_rate=config.model_learning_rate,
      use_bfloat16=config.use_bfloat16, eval_batch_size=config.eval_batch_size,
      use_tpu=config.use_tpu, tpu=config.tpu, tpu_zone=config.tpu_zone,
      gcp_project=config.gcp_project, num_replicas=config.num_replicas,
      tpu_iterations_per_loop=config.tpu_iterations_per_loop,
      keep_checkpoint_max=KEEP_CHECKPOINTS,
      seed=candidates_lib.training_seed(config.seed, run))


def test_config(train_config: TrainEvalConfig) -> TrainEvalConfig:
  """The evaluation on the test split of a training's model dir."""
  return dataclasses.replace(train_config, mode='evaluate', eval_split='test')


def _train(config: EvaluationConfig, search: Search, candidate: Candidate,
           run: int, hooks) -> Dict[str, Any]:
  """Trains (or resumes) one run, evaluates it on both splits."""
  train_config = training_config(config, search, candidate, run)
  try:
    validation = train_eval.run(train_config, search.spec, hooks=hooks)
    test = train_eval.run(test_config(train_config), search.spec)
  except (config_lib.ConfigError, train_eval.WarmStartError) as e:
    raise EvaluationError(f'training {train_config.model_dir}: {e}') from None
  return {'candidate': candidate.id, 'run': run, 'seed': train_config.seed,
          'model_dir': train_config.model_dir,
          'global_step': validation.global_step,
          'validation': validation.top_1_accuracy,
          'test': test.top_1_accuracy,
          'validation_examples': validation.num_examples,
          'test_examples': test.num_examples}


def _mine(items: Sequence[Any], config: EvaluationConfig) -> List[Any]:
  return [x for i, x in enumerate(items)
          if i % config.num_shards == config.shard_index]


def owners(plan: Plan) -> Dict[str, Candidate]:
  """Candidate id -> the first candidate of the same architecture.

  Candidates of one architecture (a random draw that equals a searched
  one, two searches that agree) share its one-shot score and trainings:
  with the same seeds they would train to the same weights.
  """
  first: Dict[str, Candidate] = {}
  return {c.id: first.setdefault(c.architecture, c) for c in plan.candidates}


def unique(plan: Plan) -> List[Candidate]:
  """The candidates that own their work (`owners`), in plan order."""
  return [c for c in plan.candidates if owners(plan)[c.id] is c]


def trainings(plan: Plan, config: EvaluationConfig
              ) -> List[Tuple[Candidate, int]]:
  """Every (candidate, run) to train, first runs first: a partial report
  covers every candidate once before any has a second seed."""
  return [(c, r) for r in range(config.seeds) for c in unique(plan)]


def _one_shot(config: EvaluationConfig, plan: Plan,
              searches: Sequence[Search]) -> None:
  todo = [c for c in _mine(unique(plan), config)
          if not gfile.exists(one_shot_path(config.output_dir, c))]
  if not todo:
    return
  nets = [one_shot.Supernet(s.model_dir, s.config, s.step_plan)
          for s in searches]
  batch = config.one_shot_batch_size or one_shot.default_batch_size(
      searches[0].config)
  try:
    with one_shot.Scorer(searches[0].spec, nets, batch_size=batch,
                         num_batches=config.one_shot_batches,
                         data_dir=config.data_dir) as scorer:
      for candidate in todo:
        began = time.time()
        scores = scorer.accuracies(
            architecture.parse_indices(candidate.architecture))
        write_atomically(one_shot_path(config.output_dir, candidate),
                         json.dumps({'candidate': candidate.id,
                                     'batch_size': batch,
                                     'batches': config.one_shot_batches,
                                     'accuracies': scores}))
        logging.info('evaluation: one-shot %s: %s (%.1fs)', candidate.id,
                     ', '.join(f'{a:.4f}' for a in scores),
                     time.time() - began)
  except (ValueError, train_eval.WarmStartError) as e:
    raise EvaluationError(f'one-shot scores: {str(e).splitlines()[0]}'
                          ) from None


def run(config: EvaluationConfig, hooks=None) -> Optional[Dict[str, Any]]:
  """Runs this shard's share of the evaluation and reports.

  Args:
    config: the validated config.
    hooks: training session hooks (tests).

  Returns:
    The report (`report.build`), or None for a shard of several (whose
    report a `report_only` run writes).

  Raises:
    EvaluationError: for bad input (nothing written) or a training that
      cannot run.
  """
  config, plan, searches = prepare(config)
  if config.report_only:
    return write_report(config, plan)
  logging.info('evaluation: %s', describe_recipe(config, searches[0],
                                                 plan.candidates[0]))
  _one_shot(config, plan, searches)
  everything = trainings(plan, config)
  mine = _mine(everything, config)
  todo = [(c, r) for c, r in mine
          if not gfile.exists(result_path(config.output_dir, c, r))]
  logging.info('evaluation: %d candidates (%d architectures), %d trainings; '
               'shard %d/%d has %d, %d of them to do', len(plan.candidates),
               len(unique(plan)), len(everything),
               config.shard_index, config.num_shards, len(mine), len(todo))
  began = time.time()
  for done, (candidate, r) in enumerate(todo, start=1):
    logging.info('evaluation: training %s run %d (%d of %d to do)',
                 candidate.id, r, done, len(todo))
    result = _train(config, searches[0], candidate, r, hooks)
    write_atomically(result_path(config.output_dir, candidate, r),
                     json.dumps(result, indent=1))
    eta = (time.time() - began) / done * (len(todo) - done)
    logging.info(
        'evaluation: %s run %d: validation %.4f, test %.4f; %d of %d '
        'trainings of this shard done, ETA %s', candidate.id, r,
        result['validation'], result['test'], len(mine) - len(todo) + done,
        len(mine), progress.format_seconds(eta))
    if config.num_shards == 1:
      write_report(config, plan)
  if config.num_shards > 1:
    logging.info('evaluation: shard %d/%d done; report with --report_only '
                 '--output_dir=%s', config.shard_index, config.num_shards,
                 config.output_dir)
    return None
  return write_report(config, plan)


def collect(config: EvaluationConfig, plan: Plan
            ) -> Tuple[Dict[str, List[float]], Dict[str, List[Dict]]]:
  """The finished work: one-shot scores and training results by candidate."""
  scores, runs = {}, {}
  for cid, owner in owners(plan).items():
    found = read_json(one_shot_path(config.output_dir, owner))
    if found is not None:
      scores[cid] = found['accuracies']
    runs[cid] = [r for r in (
        read_json(result_path(config.output_dir, owner, run))
        for run in range(config.seeds)) if r is not None]
  return scores, runs


def write_report(config: EvaluationConfig, plan: Plan) -> Dict[str, Any]:
  """Writes evaluation.json, evaluation.txt and evaluation.png."""
  scores, runs = collect(config, plan)
  built = report.build(plan, scores, runs, seeds=config.seeds,
                       seed=config.seed,
                       bootstrap_resamples=config.bootstrap_resamples,
                       decisive_difference=config.decisive_difference)
  for line in report.warnings(built):
    logging.warning('evaluation: %s', line)
  text = report.format_text(built)
  write_atomically(os.path.join(config.output_dir, report.JSON_FILENAME),
                   json.dumps(built, indent=1, sort_keys=True))
  write_atomically(os.path.join(config.output_dir, report.TEXT_FILENAME),
                   text + '\n')
  path = os.path.join(config.output_dir, report.FIGURE_FILENAME)
  figure.plot(path, built, temporary_name(path))
  return built
