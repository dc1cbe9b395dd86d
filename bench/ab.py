#!/usr/bin/env python3
"""A/B of two versions of the code: one benchmark, alternately, on one machine.

  .venv/bin/python bench/ab.py --a=HEAD --b=no-slice-gradient --runs=5 \\
      --keys=search_ms -- python bench/search_step.py \\
      --search_space=proxylessnas_search --image_size=64 --sides=search

A side is a git revision (a commit, branch or tag), checked out into a
detached worktree under --work_dir and removed afterwards, or `.` for this
working tree as it is, uncommitted changes included. The command after `--`
runs in each side's root, with that side's code first on PYTHONPATH and a
leading `python` meaning this interpreter: both sides share the packages of
the venv running this script (from a fresh clone: `make venv`, then this
script), so a revision that changes requirements/ needs its own venv. Each
side runs its own copy of the benchmark script.

The runs alternate, A then B, --runs times each, so that a machine getting
busier or quieter shifts both sides alike. Each run must print one JSON
object on stdout (its last line that parses as one, else the whole of
stdout); its numbers, nested keys joined with '.', are the run's figures.

The result is one JSON object, printed and appended as one line to
--results (default bench/results/ab.jsonl): the command, both sides
(revision as given, commit, whether it had uncommitted changes), the
machine, every run's figures in the order they ran, each side's median of
every figure, and the ratio B/A of the medians (for --keys, or every figure
both sides have). A run that fails stops the A/B: the runs done so far are
still appended, marked `"complete": false`. Each finished run is also
logged to stderr as it comes.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'bench', 'results', 'ab.jsonl')
WORKING_TREE = '.'
SIDES = ('a', 'b')


class AbError(Exception):
  """Bad input, said in one line."""


class RunFailed(AbError):
  """A run failed, timed out or printed no JSON object."""


def schedule(runs: int) -> List[str]:
  """The order of the runs: a, b, a, b, ... (`runs` of each)."""
  if runs < 1:
    raise AbError(f'--runs must be at least 1, got {runs}')
  return [side for _ in range(runs) for side in SIDES]


def parse_figures(stdout: str) -> Dict[str, float]:
  """The numbers of the JSON object a benchmark printed last.

  Args:
    stdout: the run's standard output, whose last JSON object (on one line
      or indented over several) runs to its end; lines before it may hold
      anything.

  Returns:
    Every number (not a bool) by key; a nested object's keys are joined
    with '.', e.g. `trace.search.step_ms`.

  Raises:
    AbError: if no JSON object ends the output.
  """
  lines = stdout.strip().splitlines()
  for start in reversed(range(len(lines))):
    if not lines[start].startswith('{'):
      continue
    try:
      found = json.loads('\n'.join(lines[start:]))
    except ValueError:
      continue
    if isinstance(found, dict):
      return dict(_numbers(found, ''))
  tail = lines[-1:] or ['(nothing)']
  raise AbError(f'the command printed no JSON object (last line: '
                f'{tail[0][:200]!r})')


def _numbers(value: Any, prefix: str) -> Iterator:
  if isinstance(value, dict):
    for key, item in value.items():
      yield from _numbers(item, f'{prefix}{key}.' if prefix or key else '')
  elif isinstance(value, (int, float)) and not isinstance(value, bool):
    yield prefix[:-1], float(value)


def medians(runs: Sequence[Dict[str, float]]) -> Dict[str, float]:
  """The median of each figure over the runs that have it."""
  keys = sorted({k for run in runs for k in run})
  return {k: statistics.median([run[k] for run in runs if k in run])
          for k in keys}


def ratios(a: Dict[str, float], b: Dict[str, float],
           keys: Optional[Sequence[str]] = None) -> Dict[str, float]:
  """B / A of each median: of `keys`, or of every figure both sides have.

  A figure that a side lacks, or that is 0 on side A, has no ratio.
  """
  keys = keys or sorted(set(a) & set(b))
  return {k: b[k] / a[k] for k in keys if k in a and k in b and a[k] != 0}


def command_for(command: Sequence[str], python: str) -> List[str]:
  """`command` with a leading `python` or `python3` made `python`."""
  command = list(command)
  if not command:
    raise AbError('no command: give the benchmark after `--`')
  if command[0] in ('python', 'python3'):
    command[0] = python
  return command


def machine() -> Dict[str, Any]:
  """What the runs ran on: host, system, CPU model and count, GPUs."""
  info = {'host': platform.node(), 'system': platform.platform(),
          'cpus': os.cpu_count(), 'python': platform.python_version()}
  with contextlib.suppress(OSError):
    with open('/proc/cpuinfo') as f:
      models = [l.split(':', 1)[1].strip() for l in f
                if l.startswith('model name')]
    if models:
      info['cpu'] = models[0]
  with contextlib.suppress(OSError, subprocess.SubprocessError):
    gpus = subprocess.run(
        ['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'],
        capture_output=True, text=True, timeout=30, check=True).stdout
    info['gpus'] = [g.strip() for g in gpus.splitlines() if g.strip()]
  return info


def _git(*args: str, cwd: str = ROOT) -> str:
  result = subprocess.run(['git', *args], cwd=cwd, capture_output=True,
                          text=True, check=False)
  if result.returncode:
    raise AbError(f'git {" ".join(args)}: '
                  f'{(result.stderr.strip() or result.stdout.strip())[:300]}')
  return result.stdout.strip()


def describe(revision: str, repo: str = ROOT) -> Dict[str, Any]:
  """A side: its revision as given, its commit, whether it is dirty.

  Raises:
    AbError: for a revision git does not know.
  """
  if revision == WORKING_TREE:
    commit = _git('rev-parse', 'HEAD', cwd=repo)
    dirty = bool(_git('status', '--porcelain', cwd=repo))
    return {'revision': revision, 'commit': commit, 'dirty': dirty}
  try:
    commit = _git('rev-parse', '--verify', '--quiet',
                  f'{revision}^{{commit}}', cwd=repo)
  except AbError:
    raise AbError(f'unknown revision {revision!r}; give a commit, branch or '
                  f'tag of {repo}, or {WORKING_TREE!r} for the working '
                  'tree') from None
  return {'revision': revision, 'commit': commit, 'dirty': False}


@contextlib.contextmanager
def checkout(side: Dict[str, Any], work_dir: str,
             repo: str = ROOT) -> Iterator[str]:
  """The root of a side's code: a detached worktree, or the working tree."""
  if side['revision'] == WORKING_TREE:
    yield repo
    return
  path = tempfile.mkdtemp(prefix=side['commit'][:10] + '-', dir=work_dir)
  _git('worktree', 'add', '--detach', '--force', path, side['commit'],
       cwd=repo)
  try:
    yield path
  finally:
    _git('worktree', 'remove', '--force', path, cwd=repo)


def run_once(command: Sequence[str], root: str,
             timeout_s: Optional[float]) -> Dict[str, float]:
  """Runs the command in `root` with its code first on PYTHONPATH.

  Raises:
    RunFailed: if it fails, times out or prints no JSON object.
  """
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(
      [root] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
  try:
    result = subprocess.run(list(command), cwd=root, env=env,
                            capture_output=True, text=True, check=False,
                            timeout=timeout_s)
  except subprocess.TimeoutExpired:
    raise RunFailed(f'the command ran past --timeout_s={timeout_s}') from None
  if result.returncode:
    tail = result.stderr.strip().splitlines()[-3:]
    raise RunFailed(f'the command exited with {result.returncode}: '
                  f'{" | ".join(tail)[:400]}')
  try:
    return parse_figures(result.stdout)
  except AbError as e:
    raise RunFailed(str(e)) from None


def make_record(command: Sequence[str], sides: Dict[str, Dict[str, Any]],
                runs: List[Dict[str, Any]], keys: Optional[Sequence[str]],
                complete: bool, info: Dict[str, Any]) -> Dict[str, Any]:
  """The JSON line of an A/B (module docstring)."""
  per_side = {s: medians([r['figures'] for r in runs if r['side'] == s])
              for s in SIDES}
  record = {'benchmark': 'ab', 'command': list(command),
            'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec='seconds'),
            'a': sides['a'], 'b': sides['b'], 'machine': info,
            'complete': complete, 'runs': runs, 'medians': per_side}
  if complete:
    record['ratio_b_over_a'] = ratios(per_side['a'], per_side['b'], keys)
  return record


def append(path: str, record: Dict[str, Any]) -> None:
  """Appends `record` as one line (the directory is made if needed)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'a') as f:
    f.write(json.dumps(record, sort_keys=True) + '\n')


def ab(command: Sequence[str], a: str, b: str, runs: int,
       keys: Optional[Sequence[str]] = None, work_dir: Optional[str] = None,
       timeout_s: Optional[float] = None, results: str = RESULTS,
       repo: str = ROOT, log=sys.stderr) -> Dict[str, Any]:
  """Runs the A/B and appends its record to `results`; returns the record.

  Raises:
    AbError: for bad input; nothing is run or written then.
    RunFailed: for a failed run; the runs so far are appended, marked
      incomplete.
  """
  order = schedule(runs)
  command = command_for(command, sys.executable)
  sides = {'a': describe(a, repo), 'b': describe(b, repo)}
  info = machine()
  done: List[Dict[str, Any]] = []
  work_dir = work_dir or tempfile.gettempdir()
  os.makedirs(work_dir, exist_ok=True)
  complete = False
  try:
    with checkout(sides['a'], work_dir, repo) as root_a, \
        checkout(sides['b'], work_dir, repo) as root_b:
      roots = {'a': root_a, 'b': root_b}
      for i, side in enumerate(order):
        figures = run_once(command, roots[side], timeout_s)
        missing = [k for k in keys or [] if k not in figures]
        if missing:
          raise RunFailed(f'--keys {missing} are not among the figures of '
                          f'side {side}: {sorted(figures)}')
        done.append({'side': side, 'run': i // 2, 'figures': figures})
        shown = {k: figures[k] for k in (keys or []) if k in figures}
        print(f'ab: run {i + 1}/{len(order)} ({side}) done'
              + (f': {json.dumps(shown)}' if shown else ''), file=log,
              flush=True)
    complete = True
  finally:
    if done or complete:
      record = make_record(command, sides, done, keys, complete, info)
      append(results, record)
  return record


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  command = argv[argv.index('--') + 1:] if '--' in argv else []
  own = argv[:argv.index('--')] if '--' in argv else argv
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n\n', 1)[0],
      usage='ab.py --a=REV --b=REV [--runs=N] [--keys=K,...] -- COMMAND...')
  parser.add_argument('--a', required=True, help='Side A: a git revision, or '
                      f'{WORKING_TREE!r} for the working tree.')
  parser.add_argument('--b', required=True, help='Side B (as --a).')
  parser.add_argument('--runs', type=int, default=5,
                      help='Runs of each side, alternating.')
  parser.add_argument('--keys', default='', help='Comma-separated figures '
                      'to take ratios of (default: every common one).')
  parser.add_argument('--work_dir', default=None, help='Where the worktrees '
                      'go (default: the system temp dir).')
  parser.add_argument('--timeout_s', type=float, default=None,
                      help='Limit of one run, in seconds.')
  parser.add_argument('--results', default=RESULTS,
                      help='The JSON-lines file the record is appended to.')
  args = parser.parse_args(own)
  keys = [k for k in args.keys.split(',') if k]
  try:
    record = ab(command, args.a, args.b, args.runs, keys, args.work_dir,
                args.timeout_s, args.results)
  except RunFailed as e:
    print(f'ab.py: {e}', file=sys.stderr)
    return 1
  except AbError as e:
    print(f'ab.py: {e}', file=sys.stderr)
    return 2
  print(json.dumps(record, indent=1, sort_keys=True))
  return 0


if __name__ == '__main__':
  sys.exit(main())
