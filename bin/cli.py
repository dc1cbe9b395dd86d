"""Shared CLI plumbing: one-line errors and exit codes for every bin/ tool."""

# pylint: disable=g-bad-import-order
# First, before anything can import TensorFlow: quiets its C++ start-up.
from . import _quiet
# pylint: enable=g-bad-import-order

import contextlib
import os
import sys
from typing import Callable, Iterable, Iterator, Optional

from absl import app
from absl import flags

from tunas_search.registry import UnknownNameError

# Flags defined here (define_auto_bool) belong to the tool that asks for
# them: --helpfull lists them under its name and its --help shows them.
flags.disclaim_key_flags()

# Exit codes: 2 for bad input (as argparse), 1 for a run that failed.
USAGE_EXIT_CODE = 2
FAILURE_EXIT_CODE = 1
# The values of a flag defined by define_auto_bool.
AUTO, TRUE, FALSE = 'auto', 'true', 'false'


class UsageError(Exception):
  """Bad input: printed as one line, exit code 2."""


def fail(message: str, exit_code: int = USAGE_EXIT_CODE) -> None:
  """Prints `prog: error: message` on stderr and exits."""
  prog = os.path.basename(sys.argv[0]) if sys.argv else 'tunas_search'
  print(f'{prog}: error: {message}', file=sys.stderr)
  sys.exit(exit_code)


def get_or_usage(getter: Callable, name: str,
                 extra: Optional[Iterable[str]] = None):
  """Looks `name` up in a registry; an unknown name becomes a UsageError."""
  try:
    return getter(name)
  except UnknownNameError as e:
    message = str(e)
    if extra:
      message += ', ' + ', '.join(extra)
    raise UsageError(message) from None


class _AutoBoolParser(flags.ArgumentParser):
  """Parses 'auto', or a boolean in any absl spelling, to AUTO/TRUE/FALSE."""

  def parse(self, argument) -> str:
    if isinstance(argument, str) and argument.lower() == AUTO:
      return AUTO
    try:
      return TRUE if flags.BooleanParser().parse(argument) else FALSE
    except (TypeError, ValueError):
      raise ValueError(f'{argument!r} is not auto, true or false') from None

  def flag_type(self) -> str:
    return 'auto|bool'


def define_auto_bool(name: str, help_text: str,
                     flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines --name=auto|true|false, default auto.

  The flag also takes the boolean spellings --name and --noname, so presets
  and command lines written for a boolean flag keep working. Read it with
  `resolve_auto_bool`.
  """
  flags.DEFINE_flag(flags.Flag(
      _AutoBoolParser(), flags.ArgumentSerializer(), name, AUTO,
      f'{help_text} (auto, true or false)', boolean=True), flag_values)


def resolve_auto_bool(value: str, auto: bool) -> bool:
  """The bool a define_auto_bool flag means, `auto` standing for AUTO."""
  return auto if value == AUTO else value == TRUE


def check_no_empty_values(flag_values: flags.FlagValues = flags.FLAGS
                          ) -> None:
  """Refuses `--name=` for a string flag whose default is unset (None).

  An empty value would read as the flag left out (a plot not drawn, a cost
  model file not read, the latest checkpoint exported), which silently does
  something else than the user asked.

  Raises:
    UsageError: naming the first such flag.
  """
  for name in sorted(flag_values):
    flag = flag_values[name]
    if (flag.present and flag.value == '' and flag.default is None and
        flag.flag_type() == 'string'):
      raise UsageError(f'--{name} is empty; give a value or leave the flag '
                       'out')


def parse_flags(argv):
  """absl's flag parsing with a bad flag as one line and exit 2 (`fail`)."""
  try:
    argv = flags.FLAGS(argv)
    check_no_empty_values()
  except flags.Error as e:
    fail(str(e).splitlines()[0])
  except UsageError as e:
    fail(str(e))
  return argv


def call_main(main: Callable, argv):
  """Runs a tool's `main(argv)` on parsed flags as `run` does.

  A UsageError becomes one line and exit 2; a closed stdout (`... | head`)
  exit 1. Tests call it to run many command lines in one process.
  """
  _quiet.quiet_python(flags.FLAGS.verbosity)
  try:
    return main(argv)
  except UsageError as e:
    fail(str(e))
  except BrokenPipeError:
    # The reader went away (`... | head`): nothing to report. Python's
    # recipe: stdout to devnull, so that its flush at exit cannot fail.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(FAILURE_EXIT_CODE)


def run(main: Callable) -> None:
  """absl.app.run with one-line errors for bad flags and UsageError.

  TensorFlow's own INFO, warning and deprecation messages (hundreds of lines
  from the Estimator API) are hidden unless --verbosity is 1 or more
  (`bin/_quiet.py`); the tools log their progress themselves.
  """

  app.run(lambda argv: call_main(main, argv), flags_parser=parse_flags)


def _is_remote(path: str) -> bool:
  """gs:// and other remote paths: checked by the file system on writing."""
  return '://' in path


def _nearest_existing(path: str) -> str:
  """The absolute `path`, or its closest ancestor that exists."""
  path = os.path.abspath(path)
  while not os.path.lexists(path):  # Ends at the root at the latest.
    path = os.path.dirname(path)
  return path


def check_output_dir(flag: str, path: str) -> None:
  """Checks that a local directory flag can be created and written.

  Checked before any work starts, so that a bad path is a one-line usage
  error and nothing is written. Remote paths are left to the file system.

  Args:
    flag: the flag's name, for the message.
    path: its value.

  Raises:
    UsageError: if `path` or an ancestor is a file, or the nearest existing
      directory is not writable.
  """
  if _is_remote(path):
    return
  existing = _nearest_existing(path)
  if not os.path.isdir(existing):
    raise UsageError(f'--{flag}={path}: {existing} is a file, not a '
                     'directory')
  if not os.access(existing, os.W_OK | os.X_OK):
    raise UsageError(f'--{flag}={path}: directory {existing} is not '
                     'writable')


def check_output_file(flag: str, path: str) -> None:
  """Checks that a local file flag names a file that can be written.

  Args:
    flag: the flag's name, for the message.
    path: its value: a local path whose directory exists.

  Raises:
    UsageError: if `path` is remote or a directory, or its directory is
      missing, a file or not writable.
  """
  if _is_remote(path):
    raise UsageError(f'--{flag}={path}: must be a local file')
  if os.path.isdir(path):
    raise UsageError(f'--{flag}={path} is a directory, not a file')
  directory = os.path.dirname(os.path.abspath(path))
  existing = _nearest_existing(directory)
  if not os.path.isdir(existing):
    raise UsageError(f'--{flag}={path}: {existing} is a file, not a '
                     'directory')
  if existing != directory:
    raise UsageError(f'--{flag}={path}: directory {directory} does not exist')
  if not os.access(directory, os.W_OK | os.X_OK):
    raise UsageError(f'--{flag}={path}: directory {directory} is not '
                     'writable')


@contextlib.contextmanager
def atomic_output_file(path: str, default_extension: str = ''
                       ) -> Iterator[str]:
  """Yields a temporary name for `path`; renames it into place on success.

  A failure or a kill leaves `path` as it was: an earlier file is replaced
  only by a complete new one. The temporary name lies next to `path` (the
  same file system, so the rename is atomic) and has its extension, which
  writers such as matplotlib read the format from.

  Args:
    path: the local file to write.
    default_extension: the temporary's extension when `path` has none
      (e.g. '.png'): matplotlib would otherwise append its default one to
      the name it was given, and the file would never be renamed.

  Yields:
    The name to write instead of `path`.
  """
  directory, name = os.path.split(path)
  root, extension = os.path.splitext(name)
  # No dot before the pid: it would become the extension of a `path`
  # without one.
  temporary = os.path.join(
      directory, f'.{root}-tmp{os.getpid()}{extension or default_extension}')
  try:
    yield temporary
    os.replace(temporary, path)
  finally:
    if os.path.lexists(temporary):
      os.remove(temporary)
