#!/usr/bin/env python3
"""Soak: a long CPU search killed with SIGKILL again and again; JSON.

  .venv/bin/python bench/soak.py                  # 20,000 steps, 20 kills
  .venv/bin/python bench/soak.py --max_steps=1500 --kills=8   # a short one

Runs `bin/search.py --flagfile=configs/smoke_cpu.cfg --max_steps=N` in one
model dir and kills it with SIGKILL `--kills` times, rerunning the same
command after each kill, then lets the last run finish. The kills follow a
seeded plan (`--seed`): alternately while a checkpoint is being saved (the
k-th save of the run, k in 1..3, a random 0 to `--save_kill_delay_s`
seconds after its temp dir appears) and at a random instant (uniform over `--random_kill_window_s`
seconds after the run starts, graph building included). Every few seconds
it samples the search's resident memory and the model dir's size.

Checks (`checks` in the JSON; `ok` is their conjunction):
  resumed: every rerun resumed from the checkpoint the state file named
    when it was killed (or refused in one line: then the soak stops).
  reached_max_steps: the last run exited 0 with a checkpoint at max_steps.
  baseline_continuous: the controller's reward baseline counts max_steps
    updates at the end: it was restored at every resume, never restarted.
  history_without_gaps: the reward is logged at every step the search logs
    at (host loops and checkpoints), from the first to max_steps.
  memory_flat: within each run, the resident memory of its last third of
    samples exceeds its first third's (after the first step) by at most
    `--rss_growth_limit`.
  checkpoints_bounded: the checkpoint files never exceed
    keep_checkpoint_max + 2 checkpoints (the kept ones, an unrecorded or
    unfinished one, and a save in progress).
Top-level keys: benchmark ('soak'), command, max_steps, kills, seed, logs
(the dir of each run's log), runs (one per process: the checkpoint it
resumed from, its start step, how it ended, the planned kill, what the kill
left unfinished, whether the rerun removed it), rss_mb (per run, after its
first step: first, last, max sample), dir_mb (max_checkpoints, max_all, and
events_at_end: the TensorBoard history, which grows with the steps: the
user's data, not bounded), timeline ([s, step, rss_mb, dir_mb,
checkpoint_mb] every few samples), checks, ok, rss_growth (per run),
keep_checkpoint_max, wall_s. Progress goes to stderr.
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SAVE, RANDOM = 'save', 'random'
_PROGRESS = re.compile(r'search step (\d+)/(\d+)')
_START = re.compile(r'(Starting|Resuming) search of \S+ in \S+: step (\d+) ')
_TEMP = re.compile(r'\.ckpt-(\d+)_temp')


def plan_kills(kills: int, seed: int, window_s: float,
               save_delay_s: float = 1.0) -> List[dict]:
  """The seeded kill plan: alternately at a save (up to `save_delay_s`
  after it began) and at a random instant (up to `window_s` after the run
  started)."""
  rng = random.Random(seed)
  plan = []
  for i in range(kills):
    if i % 2 == 0:
      plan.append({'kind': SAVE, 'save': rng.randint(1, 3),
                   'delay_s': round(rng.uniform(0.0, save_delay_s), 3)})
    else:
      plan.append({'kind': RANDOM,
                   'delay_s': round(rng.uniform(0.0, window_s), 1)})
  return plan


def expected_log_steps(max_steps: int, every: Sequence[int]) -> List[int]:
  """The steps a search logs at (`host_call.should_record`): multiples of any of
  `every`, and the last step."""
  return [s for s in range(1, max_steps + 1)
          if s == max_steps or any(s % n == 0 for n in every)]


def missing_steps(logged: Sequence[int], expected: Sequence[int]) -> List[int]:
  return sorted(set(expected) - set(logged))


def rss_growth(rss_mb: Sequence[float]) -> Optional[float]:
  """(median of the last third - median of the first third) / the first,
  None for fewer than 6 samples."""
  if len(rss_mb) < 6:
    return None
  third = len(rss_mb) // 3
  first = statistics.median(rss_mb[:third])
  last = statistics.median(rss_mb[-third:])
  return (last - first) / first


def checkpoint_bound_ok(checkpoint_mb: Sequence[float], one_mb: float,
                        keep: int) -> bool:
  """Whether the checkpoint files stayed within keep + 2 checkpoints."""
  return max(checkpoint_mb, default=0.0) <= (keep + 2) * one_mb * 1.01


def _dir_mb(model_dir: str) -> Dict[str, float]:
  """Sizes in MB: checkpoint files (temp dirs included), events, all."""
  sizes = {'checkpoints': 0, 'events': 0, 'all': 0}
  for root, _, names in os.walk(model_dir):
    for name in names:
      try:
        size = os.path.getsize(os.path.join(root, name))
      except OSError:
        continue  # Deleted meanwhile.
      sizes['all'] += size
      if '.ckpt-' in root or '.ckpt-' in name:
        sizes['checkpoints'] += size
      elif 'tfevents' in name:
        sizes['events'] += size
  return {k: round(v / 2**20, 2) for k, v in sizes.items()}


def _rss_mb(pid: int) -> Optional[float]:
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith('VmRSS:'):
          return round(int(line.split()[1]) / 1024, 1)
  except OSError:
    return None
  return None


class _Run:
  """One search process: its log read in a thread, its start and step."""

  def __init__(self, command: List[str], log_path: str):
    self.log = open(log_path, 'w')  # pylint: disable=consider-using-with
    self.process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
    self.began = time.monotonic()
    self.start_step: Optional[int] = None
    self.step: Optional[int] = None
    self.first_step_at: Optional[float] = None
    self.last_line = ''
    self.removed_unfinished = False
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _read(self):
    for line in self.process.stderr:
      self.log.write(line)
      self.last_line = line.strip() or self.last_line
      started = _START.search(line)
      if started:
        self.start_step = int(started.group(2))
      progress = _PROGRESS.search(line)
      if progress:
        self.step = int(progress.group(1))
        self.first_step_at = self.first_step_at or time.monotonic()
      if 'saves that did not finish' in line:
        self.removed_unfinished = True

  def finish(self) -> int:
    code = self.process.wait()
    self._reader.join(timeout=30)
    self.log.close()
    return code


def _saves_begun(model_dir: str, seen: set) -> int:
  """Adds the steps of save temp dirs present now to `seen`."""
  try:
    names = os.listdir(model_dir)
  except OSError:
    return len(seen)
  seen.update(m.group(1) for m in map(_TEMP.search, names) if m)
  return len(seen)


def _watch(run: _Run, plan: Optional[dict], model_dir: str,
           sample_s: float, samples: List[dict]) -> Optional[float]:
  """Samples the run until it exits or its planned kill is due; kills it.

  Returns:
    When it was killed (monotonic), or None if it exited by itself.
  """
  saves, next_sample = set(), 0.0
  while run.process.poll() is None:
    now = time.monotonic()
    if now >= next_sample:
      next_sample = now + sample_s
      samples.append({'t': round(now, 1), 'step': run.step,
                      'rss_mb': _rss_mb(run.process.pid),
                      'after_first_step': run.first_step_at is not None,
                      **_dir_mb(model_dir)})
    due = plan is not None and (
        (plan['kind'] == RANDOM and now - run.began >= plan['delay_s']) or
        (plan['kind'] == SAVE and _saves_begun(model_dir, saves) >=
         plan['save']))
    if due:
      if plan['kind'] == SAVE:
        time.sleep(plan['delay_s'])
      run.process.send_signal(signal.SIGKILL)
      return now
    time.sleep(0.005 if plan and plan['kind'] == SAVE else 0.1)
  return None


def _recorded(model_dir: str) -> Optional[str]:
  """The checkpoint the state file names (a rerun's resume point)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.train.latest_checkpoint(model_dir)


def _one_run(index: int, command: List[str], plan: Optional[dict],
             args: argparse.Namespace, samples: List[dict]) -> dict:
  """Runs (and kills, as planned) one search process; what it did."""
  from tunas_search.runtime import checkpoints  # pylint: disable=g-import-not-at-top
  model_dir = args.model_dir
  before = _recorded(model_dir)
  run = _Run(command, os.path.join(args.work_dir, f'run-{index:03d}.log'))
  first = len(samples)
  killed_at = _watch(run, plan, model_dir, args.sample_s, samples)
  code = run.finish()
  record = {
      'run': index, 'resumed_from': before and os.path.basename(before),
      'start_step': run.start_step, 'last_logged_step': run.step,
      'exit': 'killed' if killed_at is not None else code,
      'kill': plan if killed_at is not None else None,
      'removed_unfinished': run.removed_unfinished,
      'seconds': round(time.monotonic() - run.began, 1),
      'rss_mb': [s['rss_mb'] for s in samples[first:]
                 if s['after_first_step'] and s['rss_mb']]}
  if killed_at is not None:
    left = checkpoints.unfinished_saves(model_dir)
    record['left_unfinished'] = [os.path.basename(p) for p in left]
    record['recorded_after_kill'] = os.path.basename(
        _recorded(model_dir) or '')
  elif code != 0:
    record['error'] = run.last_line
  expected = 0 if before is None else checkpoints.step_of(before)
  record['resumed'] = run.start_step in (None, expected)
  print(f'soak: run {index}: start step {run.start_step}, last logged step '
        f'{run.step}, {record["exit"]} after {record["seconds"]} s'
        + (f', left {record.get("left_unfinished")}' if killed_at else ''),
        file=sys.stderr, flush=True)
  return record


def _history_gaps(model_dir: str, max_steps: int,
                  every: Sequence[int]) -> List[int]:
  from tunas_search.results import analysis  # pylint: disable=g-import-not-at-top
  logged = analysis.read_scalars(model_dir, (analysis.REWARD_TAG,)).get(
      analysis.REWARD_TAG, [])
  return missing_steps([s for s, _ in logged],
                       expected_log_steps(max_steps, every))


def _summarise(runs: List[dict], samples: List[dict],
               args: argparse.Namespace) -> dict:
  """The checks of a finished soak (module docstring)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with open(os.path.join(args.model_dir, 'config.json')) as f:
    config = json.load(f)
  every = (config['tpu_iterations_per_loop'], config['save_checkpoints_steps'])
  final = (tf.train.load_checkpoint(args.model_dir)
           if runs[-1]['exit'] == 0 else None)
  gaps = (_history_gaps(args.model_dir, args.max_steps, every) if final
          else None)
  growth = [g for g in (rss_growth(r['rss_mb']) for r in runs)
            if g is not None]
  final_count = lambda name: int(final.get_tensor(name)) if final else None
  checks = {
      'resumed': all(r['resumed'] for r in runs),
      'reached_max_steps': final_count('global_step') == args.max_steps,
      'baseline_continuous': final_count(
          'rlcontroller/baseline/count') == args.max_steps,
      'history_without_gaps': gaps == [],
      'memory_flat': all(g <= args.rss_growth_limit for g in growth),
      'checkpoints_bounded': checkpoint_bound_ok(
          [s['checkpoints'] for s in samples], _checkpoint_mb(args.model_dir),
          config['keep_checkpoint_max'])}
  return {'checks': checks, 'ok': all(checks.values()),
          'history_gaps': (gaps or [])[:20],
          'rss_growth': [round(g, 4) for g in growth],
          'keep_checkpoint_max': config['keep_checkpoint_max']}


def _checkpoint_mb(model_dir: str) -> float:
  """The size of the newest checkpoint (index and data), MB."""
  prefix = _recorded(model_dir)
  if prefix is None:
    return 0.0
  names = [n for n in os.listdir(model_dir)
           if n.startswith(os.path.basename(prefix) + '.')]
  return sum(os.path.getsize(os.path.join(model_dir, n))
             for n in names) / 2**20


def timeline(samples: List[dict], points: int = 200) -> List[list]:
  """[seconds since the first sample, step, rss_mb, dir MB, checkpoint MB]
  of at most `points` evenly spaced samples."""
  if not samples:
    return []
  stride = max(1, -(-len(samples) // points))
  start = samples[0]['t']
  return [[round(s['t'] - start, 1), s['step'], s['rss_mb'], s['all'],
           s['checkpoints']] for s in samples[::stride]]


def _per_run(runs: List[dict], key: str) -> List[dict]:
  return [{'first': r[key][0], 'last': r[key][-1], 'max': max(r[key])}
          if r[key] else None for r in runs]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--max_steps', type=int, default=20000)
  parser.add_argument('--kills', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--random_kill_window_s', type=float, default=300.0)
  parser.add_argument('--save_kill_delay_s', type=float, default=1.0)
  parser.add_argument('--sample_s', type=float, default=5.0)
  parser.add_argument('--rss_growth_limit', type=float, default=0.10)
  parser.add_argument('--model_dir', help='default: a new temporary dir')
  parser.add_argument('--search_flag', action='append', default=[],
                      help='extra bin/search.py flag (repeatable)')
  args = parser.parse_args(argv)
  if args.max_steps < 1 or args.kills < 0:
    parser.error('need --max_steps >= 1 and --kills >= 0')
  args.work_dir = tempfile.mkdtemp(prefix='tunas_soak_')
  args.model_dir = args.model_dir or os.path.join(args.work_dir, 'run')
  command = [sys.executable, os.path.join(ROOT, 'bin', 'search.py'),
             '--flagfile=' + os.path.join(ROOT, 'configs', 'smoke_cpu.cfg'),
             f'--max_steps={args.max_steps}', f'--model_dir={args.model_dir}',
             *args.search_flag]
  began, runs, samples = time.monotonic(), [], []
  kills = plan_kills(args.kills, args.seed, args.random_kill_window_s,
                     args.save_kill_delay_s)
  for index, plan in enumerate(kills + [None]):
    runs.append(_one_run(index, command, plan, args, samples))
    if runs[-1]['exit'] != 'killed':
      break  # Finished, or refused: a rerun would do the same.
  result = {'benchmark': 'soak', 'command': ' '.join(command[1:]),
            'max_steps': args.max_steps, 'kills': args.kills,
            'seed': args.seed, 'logs': args.work_dir, 'runs': runs,
            'rss_mb': _per_run(runs, 'rss_mb'),
            'dir_mb': {'max_checkpoints': max(
                           (s['checkpoints'] for s in samples), default=0),
                       'max_all': max((s['all'] for s in samples), default=0),
                       'events_at_end': samples[-1]['events'] if samples
                                        else 0},
            'timeline': timeline(samples),
            **_summarise(runs, samples, args),
            'wall_s': round(time.monotonic() - began, 1)}
  for run in runs:
    del run['rss_mb']
  print(json.dumps(result, indent=1))
  return 0 if result['ok'] else 1


if __name__ == '__main__':
  sys.exit(main())
