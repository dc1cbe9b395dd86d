"""Shared CLI plumbing: one-line errors and exit codes for every bin/ tool."""

import logging
import os
import sys
from typing import Callable, Iterable, Optional

from absl import app
from absl import flags

from tunas_search.registry import UnknownNameError

# Exit codes: 2 for bad input (as argparse), 1 for a run that failed.
USAGE_EXIT_CODE = 2


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


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(str(e).splitlines()[0])
  return argv


def run(main: Callable) -> None:
  """absl.app.run with one-line errors for bad flags and UsageError.

  TensorFlow's own INFO and deprecation messages (hundreds of lines from the
  Estimator API) are hidden; the tools log their progress themselves.
  """
  logging.getLogger('tensorflow').setLevel(logging.ERROR)

  def wrapped(argv):
    try:
      return main(argv)
    except UsageError as e:
      fail(str(e))
  app.run(wrapped, flags_parser=_parse_flags)
