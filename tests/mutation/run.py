"""`make mutation`: mutmut over the pure-Python modules, then the survivor rate.

Runs in a scratch copy of the tree (mutmut writes a mutated copy of the
sources next to its configuration, and must never touch the working tree that
others edit), with the configuration in setup.cfg ([mutmut] for mutmut,
[mutation] for which mutants count), and prints

  surviving mutants: N of M (X.X%)

where M counts the selected mutants and N those no test detected (survived,
or no test reaches them). Equivalent mutants, which no test can kill, are
named in docs/mutation.md and reported apart; they still count in N. Exits 1
when the rate is above --fail_above (10%).
"""

import argparse
import configparser
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Set, Tuple

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_COPIED = ('tunas_search', 'search_spaces', 'tests', 'pytest.ini',
           'setup.cfg')
_DOC = os.path.join('docs', 'mutation.md')
# mutmut's exit-code verdicts (mutmut.stats.status_by_exit_code), grouped.
_DETECTED = ('killed', 'timeout', 'segfault', 'caught by type check')
_UNDETECTED = ('survived', 'no tests')
# A table row of docs/mutation.md naming an equivalent mutant: | `name` | ...
_EQUIVALENT_ROW = re.compile(r'^\|\s*`([^`]+__mutmut_\d+)`\s*\|')
# mutmut prints one line per mutant after this when given mutant names.
_RESULTS_MARKER = b'Mutant results'


def _selection(root: str) -> Tuple[List[str], List[str]]:
  """(select, exclude) fnmatch patterns from setup.cfg's [mutation]."""
  parser = configparser.ConfigParser()
  parser.read(os.path.join(root, 'setup.cfg'), encoding='utf-8')
  lines = lambda key: parser.get('mutation', key, fallback='').split()
  return lines('select'), lines('exclude')


def _prepare(work_dir: str) -> None:
  """A fresh copy of what the mutation tests need, without caches."""
  shutil.rmtree(work_dir, ignore_errors=True)
  os.makedirs(work_dir)
  ignore = shutil.ignore_patterns('__pycache__', '*.pyc', '.pytest_cache')
  for name in _COPIED:
    source = os.path.join(_ROOT, name)
    target = os.path.join(work_dir, name)
    if os.path.isdir(source):
      shutil.copytree(source, target, ignore=ignore)
    else:
      shutil.copy2(source, target)


def _run_mutmut(work_dir: str, jobs: int, select: List[str]) -> int:
  """Runs `mutmut run` in `work_dir`; streams its progress, logs the rest."""
  command = [sys.executable, '-m', 'mutmut', 'run', '--max-children',
             str(jobs)] + select
  # mutmut hands each mutant its tests as a set: a fixed hash seed keeps
  # their order, and so a rerun's timings and timeouts, the same.
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONHASHSEED='0')
  log_path = os.path.join(work_dir, 'mutmut.log')
  with open(log_path, 'wb') as log:
    process = subprocess.Popen(command, cwd=work_dir, env=env,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    echo = True  # Until the per-mutant list, which goes to the log only.
    while True:
      chunk = os.read(process.stdout.fileno(), 65536)
      if not chunk:
        break
      log.write(chunk)
      if echo:
        shown = chunk.split(_RESULTS_MARKER)[0]
        sys.stdout.buffer.write(shown)
        sys.stdout.flush()
        echo = len(shown) == len(chunk)
    code = process.wait()
  print(f'\nmutmut log: {log_path}')
  return code


def _results(work_dir: str) -> Dict[str, str]:
  """Mutant name -> mutmut status, from the .meta files mutmut writes."""
  from mutmut.stats import status_by_exit_code  # pylint: disable=g-import-not-at-top
  statuses = {}
  pattern = os.path.join(work_dir, 'mutants', '**', '*.py.meta')
  for path in glob.glob(pattern, recursive=True):
    with open(path, encoding='utf-8') as f:
      codes = json.load(f)['exit_code_by_key']
    for name, code in codes.items():
      statuses[name] = status_by_exit_code[code]
  return statuses


def _equivalents(root: str) -> Set[str]:
  with open(os.path.join(root, _DOC), encoding='utf-8') as f:
    return {m.group(1) for m in map(_EQUIVALENT_ROW.match, f) if m}


def _matches(name: str, patterns: List[str]) -> bool:
  return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def report(statuses: Dict[str, str], select: List[str], exclude: List[str],
           equivalents: Set[str], partial: bool = False) -> float:
  """Prints the verdicts of the selected mutants; returns the survivor %.

  Args:
    statuses: mutant name -> mutmut status.
    select: fnmatch patterns of the mutants that count.
    exclude: patterns of mutants that do not count after all.
    equivalents: names of the mutants docs/mutation.md calls equivalent.
    partial: whether `statuses` covers only part of the selection (--only),
      so that an equivalent mutant missing from it is not stale.
  """
  chosen = {n: s for n, s in statuses.items()
            if _matches(n, select) and not _matches(n, exclude)}
  by_status: Dict[str, int] = {}
  for status in chosen.values():
    by_status[status] = by_status.get(status, 0) + 1
  print('verdicts: ' + ', '.join(f'{s} {c}' for s, c in
                                 sorted(by_status.items())))
  undetected = sorted(n for n, s in chosen.items() if s in _UNDETECTED)
  unexplained = [n for n in undetected if n not in equivalents]
  other = sorted(n for n, s in chosen.items()
                 if s not in _UNDETECTED + _DETECTED)
  for name in unexplained:
    print(f'  {chosen[name]}: {name}')
  for name in other:
    print(f'  not judged ({chosen[name]}): {name}')
  if unexplained:
    print('  (the diff of one: `python -m mutmut show NAME` in the work dir)')
  stale = sorted(n for n in equivalents
                 if (n in chosen and n not in undetected) or
                 (n not in chosen and not partial))
  for name in stale:
    print(f'  {_DOC} names {name} as equivalent, but it '
          f'{"is " + chosen[name] if name in chosen else "no longer exists"}')
  total = len(chosen)
  rate = 100.0 * len(undetected) / total if total else 0.0
  print(f'explained in {_DOC} (equivalent, killed only by TensorFlow '
        f'tests, or path-only): {len(undetected) - len(unexplained)}; '
        'unexplained: '
        f'{len(unexplained)}')
  print(f'surviving mutants: {len(undetected)} of {total} ({rate:.1f}%)')
  return rate


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--work_dir', default=os.path.join(_ROOT, 'build',
                                                         'mutation'))
  parser.add_argument('--jobs', type=int, default=1,
                      help='mutants tested at once (forked workers)')
  parser.add_argument('--fail_above', type=float, default=10.0,
                      help='exit 1 when the surviving rate (%%) is above this')
  parser.add_argument('--report_only', action='store_true',
                      help='only summarise the last run in --work_dir')
  parser.add_argument('--only', action='append', default=[],
                      metavar='PATTERN',
                      help='run (and count) only the selected mutants that '
                      'also match this fnmatch pattern, e.g. '
                      "'tunas_search.space.schema.*'; repeatable")
  args = parser.parse_args()
  select, exclude = _selection(_ROOT)
  began = time.time()
  if not args.report_only:
    _prepare(args.work_dir)
    code = _run_mutmut(args.work_dir, args.jobs, args.only or select)
    if code != 0:
      print(f'mutmut run failed with exit code {code}', file=sys.stderr)
      return code
  statuses = _results(args.work_dir)
  if args.only:
    statuses = {n: s for n, s in statuses.items() if _matches(n, args.only)}
  rate = report(statuses, select, exclude, _equivalents(_ROOT),
                partial=bool(args.only))
  if not args.report_only:
    print(f'mutation run took {(time.time() - began) / 60:.1f} min')
  return 1 if rate > args.fail_above else 0


if __name__ == '__main__':
  sys.exit(main())
