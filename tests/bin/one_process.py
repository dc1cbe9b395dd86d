"""Runs many command lines of one bin/ tool in one Python process.

Each command line goes through the tool's flag parsing and `main` as
`cli.run` does inside absl's app.run (`cli.parse_flags`, `cli.call_main`),
its stderr read at file descriptor 2, so the cases share one TensorFlow
import where a process per case pays one each. What only a whole process
shows (absl's app.run, TensorFlow's start-up chatter) stays with tests
that run the tool as a process (tests/bin/test_quiet_errors.py and each
tool's own real-process cases).
"""

import json
import os
import subprocess
import sys
from typing import List, Sequence, Tuple

from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
# Only against a hang: a slow machine sharing its CPU must not fail a run.
HANG_GUARD_S = 600

_RUN_MANY = """
import importlib, json, os, sys, tempfile
from bin import cli
name, command_lines = sys.argv[1], json.loads(sys.argv[2])
tool = importlib.import_module('bin.' + name)
tool.define_flags()
out = []
for argv in command_lines:
  tool.FLAGS.unparse_flags()
  sys.argv = [name + '.py'] + argv
  with tempfile.TemporaryFile('w+') as err:
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(err.fileno(), 2)
    try:
      cli.call_main(tool.main, cli.parse_flags(sys.argv))
      code = 0
    except SystemExit as e:
      code = e.code
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
    err.seek(0)
    out.append([code, err.read()])
print(json.dumps(out))
"""


def run_many(tool: str, command_lines: Sequence[Sequence[str]]
             ) -> List[Tuple[int, str]]:
  """(exit code, stderr) of `bin/<tool>.py` on each command line, in order.

  The tool must define its flags in `define_flags()` and run `main(argv)`
  through `cli.run`. A case the tool does not refuse runs to its end.
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env.pop('TF_CONFIG', None)
  done = subprocess.run(
      [sys.executable, '-c', _RUN_MANY, tool, json.dumps(
          [list(c) for c in command_lines])],
      cwd=ROOT, env=env, capture_output=True, text=True,
      timeout=HANG_GUARD_S)
  assert done.returncode == 0, done.stderr[-2000:]
  return [(code, err) for code, err in
          json.loads(done.stdout.splitlines()[-1])]


def refusals(tool: str, dir_flag: str, cases, make_dir
             ) -> List[Tuple[str, int, str]]:
  """(dir, exit code, stderr) of each (flags, message) case of `tool`.

  Each case gets `--<dir_flag>=<a fresh path from make_dir()>` before its
  flags, so a test can check that nothing was written there.
  """
  dirs = [str(make_dir()) for _ in cases]
  results = run_many(tool, [[f'--{dir_flag}={d}', *flags]
                            for d, (flags, _) in zip(dirs, cases)])
  return [(d, code, err) for d, (code, err) in zip(dirs, results)]


def run_main(tool, *args: str) -> None:
  """Parses `args` on a fresh FlagValues of `tool`'s flags and runs its
  `main` in this process (what it prints goes to the caller's capsys)."""
  flag_values = flags.FlagValues()
  tool.define_flags(flag_values)
  argv = flag_values([tool.__name__.rsplit('.', 1)[-1], *args])
  tool.main(argv, flag_values)
