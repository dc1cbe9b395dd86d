#!/usr/bin/env python3
"""Whether two versions of the code compute the same search and training.

  .venv/bin/python bench/same_results.py --a=17a6138 --b=. [--work_dir=DIR]

Runs the same short, seeded jobs with both versions' code on the embedded
dataset and compares what they produced, exactly: every logged scalar at
every step (losses, rewards, logits, probabilities), the architecture each
step sampled, the final search result, and every value of the last
checkpoint. The jobs (each side checked out as bench/ab.py does):

  search         the tiny space of tests/e2e/tiny.py with the deferred
                 update, sampled widths and pre_update validation
  search_tuned   the same with every_step updates, masked widths and
                 post_update validation
  search_space   mobilenet_v3_like_search (squeeze-excite, swish, searched
                 widths) in bfloat16
  standalone     train_eval of the architecture `search` found, started
                 from its weights, with dropout and path dropout
  resumed        side A's `search` stopped at step 4, then resumed to step 6
                 by side A and, from a copy, by side B (a model dir an older
                 version wrote; the input stream restarts on a resume, so
                 both resumes are compared, not the uninterrupted run)

Prints one JSON object: per job, whether both sides agree and, where not,
what differs (the first differing tags, steps and tensors, with the largest
absolute difference). Exits 1 when anything differs. The inputs are the
embedded dataset's, whose preprocessing has no Inception crop, and every
job's steps come from max_steps, not epochs.

A side that is a commit is not run again when --work_dir holds its outputs
(from an earlier comparison with the same --work_dir).

With --probe, this script is the job itself, run in a side's checkout with
its code first on the path (it uses only calls both versions share).
"""

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # pylint: disable=g-import-not-at-top,wrong-import-position

JOBS = ('search', 'search_tuned', 'search_space', 'standalone', 'resumed')
SEARCH_STEPS = 6
RESUME_AT = 4
STANDALONE_STEPS = 4


# The probe: runs one job with the code on the path, writes what it made. --


def _search_config(kind: str, model_dir: str):
  from tunas_search.config import SearchConfig  # pylint: disable=g-import-not-at-top
  values = dict(
      search_space='tiny', model_dir=model_dir, num_classes=10,
      num_train_examples=10000, dataset='embedded', image_size=28,
      input_channels=1, train_batch_size=4, max_steps=SEARCH_STEPS,
      rl_learning_rate=0.5, cost_model='madds', rl_cost_model_target=1.0e5,
      tpu_iterations_per_loop=2, save_checkpoints_steps=2, seed=3,
      # Short warm-ups so that the controller learns within the run.
      increase_ops_warmup_steps_fraction=0.25,
      increase_filters_warmup_steps_fraction=0.25,
      rl_delay_steps_fraction=0.34,
      # Named, not `auto`: the same form on both sides, whichever default
      # each side's version has.
      unused_weight_steps='deferred')
  if kind == 'search_tuned':
    values.update(unused_weight_steps='every_step', supernet_widths='masked',
                  validation_weights='post_update')
  if kind == 'search_space':
    values.update(search_space='mobilenet_v3_like_search', use_bfloat16=True,
                  cost_model='madds', rl_cost_model_target=2.0e6)
  return SearchConfig(**values)


def _spec(name: str, root: str):
  if name == 'tiny':
    sys.path.insert(0, os.path.join(root, 'tests', 'e2e'))
    import tiny  # pylint: disable=g-import-not-at-top
    return tiny.tiny_spec()
  import search_spaces  # pylint: disable=g-import-not-at-top
  return search_spaces.get(name).spec()


def _indices_hook(record: List[List[int]], stop_at: Optional[int]):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1

  class Indices(tf1.train.SessionRunHook):
    """Records the architecture each step sampled; stops at `stop_at`."""

    def begin(self):
      self._indices = tf1.get_collection('tunas_search/sampled_indices')[0]
      self._step = tf1.train.get_global_step()

    def before_run(self, run_context):
      return tf1.train.SessionRunArgs(self._indices)

    def after_run(self, run_context, run_values):
      record.append([int(i) for i in np.ravel(run_values.results)])
      if stop_at and run_context.session.run(self._step) >= stop_at:
        run_context.request_stop()
  return Indices()


def _scalars(model_dir: str) -> Dict[str, List[List[float]]]:
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  acc = event_accumulator.EventAccumulator(
      model_dir, size_guidance={event_accumulator.TENSORS: 0,
                                event_accumulator.SCALARS: 0})
  acc.Reload()
  out = {}
  for tag in acc.Tags()['tensors']:
    values = [(e.step, tf.make_ndarray(e.tensor_proto))
              for e in acc.Tensors(tag)]
    # Numbers only: the TensorBoard layout is a string tensor.
    if values and values[0][1].dtype.kind in 'fiu':
      out[tag] = [[step, float(v)] for step, v in values]
  for tag in acc.Tags()['scalars']:
    out[tag] = [[e.step, float(e.value)] for e in acc.Scalars(tag)]
  return out


def _checkpoint(model_dir: str) -> Dict[str, np.ndarray]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
  return {name: np.asarray(reader.get_tensor(name))
          for name in sorted(reader.get_variable_to_shape_map())}


def _without_paths(value: Any, model_dir: str) -> Any:
  """`value` without the entries that name `model_dir` (differs by side)."""
  if isinstance(value, dict):
    return {k: _without_paths(v, model_dir) for k, v in value.items()
            if not (isinstance(v, str) and model_dir in v)}
  if isinstance(value, list):
    return [_without_paths(v, model_dir) for v in value]
  return value


def probe(args) -> None:
  """Runs `args.job` in `args.model_dir` and writes its outputs."""
  root = os.getcwd()
  kind = args.job
  indices: List[List[int]] = []
  if kind == 'standalone':
    # pylint: disable=g-import-not-at-top
    try:
      from tunas_search.standalone import train_eval
    except ImportError:  # A side from before the rooms of issue 56.
      from tunas_search import train_eval
    from tunas_search.standalone import TrainEvalConfig
    # pylint: enable=g-import-not-at-top
    with open(os.path.join(args.init_from, 'search_result.json')) as f:
      found = json.load(f)['architecture']
    config = TrainEvalConfig(
        search_space='tiny', indices=found, model_dir=args.model_dir,
        num_classes=10, num_train_examples=10000, dataset='embedded',
        image_size=28, input_channels=1, train_batch_size=8,
        eval_batch_size=50, max_steps=STANDALONE_STEPS, seed=5,
        dropout_rate=0.2, path_dropout_rate=0.1,
        init_from_search=args.init_from, tpu_iterations_per_loop=2,
        save_checkpoints_steps=2)
    result = train_eval.run(config, _spec('tiny', root))
    outputs = {'result': _without_paths(
        json.loads(train_eval.result_to_json(result)), args.model_dir)}
  else:
    # pylint: disable=g-import-not-at-top
    try:
      from tunas_search.search import runner
    except ImportError:  # A side from before the rooms of issue 56.
      from tunas_search import runner
    # pylint: enable=g-import-not-at-top
    config = _search_config(kind, args.model_dir)
    result = runner.run_search(config, _spec(config.search_space, root),
                               hooks=[_indices_hook(indices, args.stop_at)])
    outputs = {'result': _without_paths(result.to_dict(), args.model_dir)}
  outputs['indices'] = indices
  outputs['scalars'] = _scalars(args.model_dir)
  np.savez(args.out + '.npz', **_checkpoint(args.model_dir))
  with open(args.out + '.json', 'w') as f:
    json.dump(outputs, f, sort_keys=True)


# The comparison. -----------------------------------------------------------


def _first(items: List[str], n: int = 5) -> List[str]:
  return items[:n] + ([f'... {len(items) - n} more'] if len(items) > n else [])


def compare(a: Dict[str, Any], b: Dict[str, Any],
            a_tensors: Dict[str, np.ndarray],
            b_tensors: Dict[str, np.ndarray]) -> Dict[str, Any]:
  """What differs between two sides' outputs of one job (empty: nothing)."""
  diff: Dict[str, Any] = {}
  if a['indices'] != b['indices']:
    diff['sampled_architectures'] = {'a': a['indices'], 'b': b['indices']}
  tags = sorted(set(a['scalars']) | set(b['scalars']))
  scalars = [t for t in tags if a['scalars'].get(t) != b['scalars'].get(t)]
  if scalars:
    diff['scalars'] = _first(scalars)
  # Where each side ran differs, nothing else may.
  results = [{k: v for k, v in out['result'].items() if k != 'model_dir'}
             for out in (a, b)]
  if results[0] != results[1]:
    diff['result'] = {'a': results[0], 'b': results[1]}
  names = sorted(set(a_tensors) | set(b_tensors))
  missing = [n for n in names if n not in a_tensors or n not in b_tensors]
  unequal = [n for n in names if n not in missing and not np.array_equal(
      a_tensors[n], b_tensors[n])]
  if missing:
    diff['checkpoint_names'] = _first(missing)
  if unequal:
    largest = max(float(np.max(np.abs(a_tensors[n].astype(np.float64)
                                      - b_tensors[n].astype(np.float64))))
                  if a_tensors[n].dtype.kind == 'f' else float('nan')
                  for n in unequal)
    diff['checkpoint_values'] = {'tensors': _first(unequal),
                                 'largest_difference': largest}
  return diff


def _load(prefix: str):
  with open(prefix + '.json') as f:
    outputs = json.load(f)
  with np.load(prefix + '.npz', allow_pickle=True) as data:
    tensors = {k: data[k] for k in data.files}
  return outputs, tensors


def _run_probe(root: str, job: str, model_dir: str, out: str,
               init_from: Optional[str] = None,
               stop_at: Optional[int] = None) -> None:
  command = [sys.executable, os.path.abspath(__file__), '--probe',
             f'--job={job}', f'--model_dir={model_dir}', f'--out={out}'] + (
                 [f'--init_from={init_from}'] if init_from else []) + (
                     [f'--stop_at={stop_at}'] if stop_at else [])
  env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run(command, cwd=root, env=env, capture_output=True,
                          text=True, check=False)
  if result.returncode:
    tail = ' | '.join(result.stderr.strip().splitlines()[-3:])
    raise ab.RunFailed(f'{job} in {root} exited with {result.returncode}: '
                       f'{tail[:600]}')


def _done(prefix: str, side: Dict[str, Any]) -> bool:
  """Whether a job's outputs at `prefix` are this commit's (a dirty tree's
  never count)."""
  marker = prefix + '.commit'
  if side['dirty'] or not os.path.exists(marker):
    return False
  with open(marker) as f:
    return f.read().strip() == side['commit']


def _job(root: str, side: Dict[str, Any], job: str, out_dir: str, log,
         **kwargs) -> None:
  """Runs one job unless out_dir holds this commit's outputs of it."""
  prefix = os.path.join(out_dir, job + '_out')
  if _done(prefix, side):
    print(f'same_results: {job} of {side["commit"][:10]} reused', file=log,
          flush=True)
    return
  print(f'same_results: {job} in {root}', file=log, flush=True)
  model_dir = kwargs.pop('model_dir', None)
  if model_dir is None:  # A fresh run: not a resume of an earlier one.
    model_dir = os.path.join(out_dir, job)
    shutil.rmtree(model_dir, ignore_errors=True)
  _run_probe(root, 'search' if job in ('resumed', 'resume_base') else job,
             model_dir, prefix, **kwargs)
  with open(prefix + '.commit', 'w') as f:
    f.write(side['commit'] + '\n')


def run_side(root: str, side: Dict[str, Any], out_dir: str,
             resume_base: str, log) -> None:
  """Every job with the code at `root`, outputs in out_dir.

  `resumed` resumes a copy of `resume_base`, a model dir stopped early.
  """
  os.makedirs(out_dir, exist_ok=True)
  for job in ('search', 'search_tuned', 'search_space'):
    _job(root, side, job, out_dir, log)
  _job(root, side, 'standalone', out_dir, log,
       init_from=os.path.join(out_dir, 'search'))
  resumed = os.path.join(out_dir, 'resumed')
  if not _done(resumed + '_out', side):
    shutil.rmtree(resumed, ignore_errors=True)
    shutil.copytree(resume_base, resumed)
  _job(root, side, 'resumed', out_dir, log, model_dir=resumed)


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--a', default='17a6138')
  parser.add_argument('--b', default=ab.WORKING_TREE)
  parser.add_argument('--work_dir', default=None,
                      help='Where checkouts and outputs go (default: a new '
                      'temporary dir).')
  parser.add_argument('--probe', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--job', help=argparse.SUPPRESS)
  parser.add_argument('--model_dir', help=argparse.SUPPRESS)
  parser.add_argument('--out', help=argparse.SUPPRESS)
  parser.add_argument('--init_from', help=argparse.SUPPRESS)
  parser.add_argument('--stop_at', type=int, default=None,
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.probe:
    probe(args)
    return 0
  log = sys.stderr
  try:
    sides = {'a': ab.describe(args.a), 'b': ab.describe(args.b)}
    work = args.work_dir or tempfile.mkdtemp(prefix='same_results_')
    outs = {s: os.path.join(work, s) for s in ab.SIDES}
    with ab.checkout(sides['a'], work) as root_a, \
        ab.checkout(sides['b'], work) as root_b:
      roots = {'a': root_a, 'b': root_b}
      # A model dir side A's version wrote and stopped early: both resume it.
      resume_base = os.path.join(work, 'resume_base')
      if not _done(resume_base + '_out', sides['a']):
        shutil.rmtree(resume_base, ignore_errors=True)
        for side in ab.SIDES:  # Their resumes must start from the new one.
          with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(outs[side], 'resumed_out.commit'))
        _job(root_a, sides['a'], 'resume_base', work, log,
             model_dir=resume_base, stop_at=RESUME_AT)
      for side in ab.SIDES:
        run_side(roots[side], sides[side], outs[side], resume_base, log)
  except ab.AbError as e:
    print(f'same_results.py: {e}', file=sys.stderr)
    return 2 if not isinstance(e, ab.RunFailed) else 1
  report: Dict[str, Any] = {'a': sides['a'], 'b': sides['b'],
                            'work_dir': work, 'jobs': {}}
  for job in JOBS:
    a_out, a_tensors = _load(os.path.join(outs['a'], job + '_out'))
    b_out, b_tensors = _load(os.path.join(outs['b'], job + '_out'))
    diff = compare(a_out, b_out, a_tensors, b_tensors)
    report['jobs'][job] = {'same': not diff, **({'differences': diff}
                                                if diff else {}),
                           'steps': len(a_out['indices']),
                           'tensors': len(a_tensors),
                           'scalar_tags': len(a_out['scalars'])}
  print(json.dumps(report, indent=1, sort_keys=True))
  return 0 if all(j['same'] for j in report['jobs'].values()) else 1


if __name__ == '__main__':
  sys.exit(main())
