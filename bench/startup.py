#!/usr/bin/env python3
"""Time from `bin/search.py` start to its first step, per search space; JSON.

  .venv/bin/python bench/startup.py [--search_space=NAME ...] [--repeats=N]
      [--search_flag=--unused_weight_steps=every_step ...]

Runs the real command line (the smoke configuration, configs/smoke_cpu.cfg,
with each space's default cost target) in a fresh process and a fresh model
dir, reads its log as it is written and stops it after the first step.

Top-level keys: benchmark ('startup'), cores (os.cpu_count() of the
machine), search_flags (the --search_flag values, added to the command line)
and spaces, which maps each search space to:
  startup_s: process start -> the first step done, of the fastest repeat
    (noise on a shared machine only adds); goal <= 30 s for
    proxylessnas_search on 2 cores.
  phases_s: the fastest repeat's milestones, seconds after start, when each
    appeared in the log: `setup` (flags parsed, imports done, model dir
    claimed), `graph` (graph built, session created, step-0 checkpoint
    written) and `first_step` (the first run, which includes TensorFlow's
    graph optimisation).
  all_startup_s: startup_s of every repeat, in order.
  graph_ops: the search graph's op count (logged with the first step).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import search_spaces  # pylint: disable=g-import-not-at-top,wrong-import-position

# Log lines that mark each phase's end (runner.py and runtime/progress.py).
MILESTONES = (('setup', 'Building the search graph'),
              ('graph', 'Saved checkpoint at step 0'),
              ('first_step', 'first step done'))
# progress.ProgressHook's first-step line.
GRAPH_OPS = re.compile(r'a graph of (\d+) ops')
DEFAULT_SPACES = ('proxylessnas_search', 'mobilenet_v3_like_search')


def measure(space: str, timeout_s: float,
            extra_flags=()) -> Tuple[dict, Optional[int]]:
  """Phase times of one start of `bin/search.py` on `space`, and its graph's
  op count (None if the log did not give it)."""
  target = search_spaces.get(space).default_cost_target
  with tempfile.TemporaryDirectory() as model_dir:
    command = [sys.executable, os.path.join(ROOT, 'bin', 'search.py'),
               '--flagfile=' + os.path.join(ROOT, 'configs', 'smoke_cpu.cfg'),
               f'--search_space={space}', f'--rl_cost_model_target={target}',
               '--model_dir=' + os.path.join(model_dir, 'run'),
               *extra_flags]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True, env=env,
                               cwd=ROOT)
    phases, graph_ops = {}, None
    try:
      for line in process.stderr:
        for name, marker in MILESTONES:
          if name not in phases and marker in line:
            phases[name] = round(time.perf_counter() - start, 2)
        ops = GRAPH_OPS.search(line)
        if ops:
          graph_ops = int(ops.group(1))
        if 'first_step' in phases or time.perf_counter() - start > timeout_s:
          break
    finally:
      process.kill()
      process.wait()
  if 'first_step' not in phases:
    raise RuntimeError(f'{space}: no first step within {timeout_s} s; '
                       f'reached {phases}')
  return phases, graph_ops


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--search_space', action='append',
                      choices=search_spaces.search_space_names(),
                      help=f'repeatable; default: {", ".join(DEFAULT_SPACES)}')
  parser.add_argument('--repeats', type=int, default=2)
  parser.add_argument('--timeout_s', type=float, default=600)
  parser.add_argument('--search_flag', action='append', default=[],
                      help='repeatable; passed on to bin/search.py, e.g. '
                      '--search_flag=--unused_weight_steps=every_step')
  args = parser.parse_args(argv)
  results = {}
  for space in args.search_space or DEFAULT_SPACES:
    measured = [measure(space, args.timeout_s, args.search_flag)
                for _ in range(args.repeats)]
    runs = [phases for phases, _ in measured]
    best = min(runs, key=lambda r: r['first_step'])
    results[space] = {'startup_s': best['first_step'], 'phases_s': best,
                      'all_startup_s': [r['first_step'] for r in runs],
                      'graph_ops': measured[0][1]}
  print(json.dumps({'benchmark': 'startup', 'cores': os.cpu_count(),
                    'search_flags': args.search_flag, 'spaces': results},
                   indent=2))


if __name__ == '__main__':
  main()
