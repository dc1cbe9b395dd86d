"""Keeps TensorFlow's start-up and library chatter out of the CLIs' stderr.

Every bin/ tool imports this module before anything imports TensorFlow:

  from . import _quiet  # pylint: disable=unused-import

Importing it sets TF_CPP_MIN_LOG_LEVEL=2, which hides TensorFlow's C++ INFO
and WARNING lines (oneDNN, cpu_feature_guard, MLIR passes), unless the
environment already sets the variable or the command line asks for debug
output with --verbosity=1 (or -v 1) or more. TensorFlow reads the variable
once, when it is first imported, which is before absl parses the flags: so
the command line is scanned here, and a --verbosity given only inside a
--flagfile reaches the Python side (`quiet_python`) but not the C++ side.

`quiet_python`, which `cli.run` calls once the flags are parsed, hides the
Python side at the same verbosities: TensorFlow's own logger, library INFO
lines that TensorFlow, TensorBoard and matplotlib send through absl or their
loggers (e.g. the event-file reader's "Found more than one graph event per
run"),
and deprecation warnings, which are addressed to developers, not to the
people running the tools. The tools' own progress lines are kept.
"""

import functools
import importlib.util
import logging
import os
import sys
import warnings
from typing import Optional, Sequence

# absl's DEBUG verbosity: from here on the tools show everything.
DEBUG_VERBOSITY = 1
# Hides C++ INFO and WARNING lines; errors are still shown.
QUIET_CPP_LOG_LEVEL = '2'
CPP_LOG_LEVEL_VAR = 'TF_CPP_MIN_LOG_LEVEL'
# Packages whose log records below ERROR are library chatter to a CLI user
# (matplotlib's: "generated new fontManager" when a new install rebuilds its
# font cache).
_LIBRARIES = ('tensorflow', 'tensorboard', 'keras', 'tf_keras',
              'tensorflow_estimator', 'tensorflow_datasets', 'matplotlib')
_VERBOSITY_FLAGS = ('-v', '--v', '-verbosity', '--verbosity')


def requested_verbosity(argv: Sequence[str]) -> Optional[int]:
  """The --verbosity (-v) value on a command line, as absl will parse it.

  Args:
    argv: the command line, program name first.

  Returns:
    The last value given, or None if there is none or it is not an integer
    (absl then reports the bad value itself).
  """
  value = None
  args = list(argv[1:])
  for i, arg in enumerate(args):
    if arg == '--':  # absl stops parsing flags here.
      break
    name, has_value, text = arg.partition('=')
    if name not in _VERBOSITY_FLAGS:
      continue
    if not has_value:
      text = args[i + 1] if i + 1 < len(args) else ''
    try:
      value = int(text)
    except ValueError:
      value = None
  return value


def wants_debug(verbosity: Optional[int]) -> bool:
  """Whether `verbosity` asks for TensorFlow's own messages."""
  return verbosity is not None and verbosity >= DEBUG_VERBOSITY


def quiet_cpp(argv: Optional[Sequence[str]] = None) -> None:
  """Sets TF_CPP_MIN_LOG_LEVEL for a quiet run; must precede TensorFlow.

  Args:
    argv: the command line; default sys.argv.
  """
  if not wants_debug(requested_verbosity(sys.argv if argv is None else argv)):
    os.environ.setdefault(CPP_LOG_LEVEL_VAR, QUIET_CPP_LOG_LEVEL)


# Log records name a handful of source files: resolve each once.
_realpath = functools.lru_cache(maxsize=1024)(os.path.realpath)


class _LibraryChatterFilter(logging.Filter):
  """Drops records below ERROR logged from inside `_LIBRARIES`' files."""

  def __init__(self):
    super().__init__()
    self._roots = []
    for name in _LIBRARIES:
      # find_spec locates a top-level package without importing it.
      spec = importlib.util.find_spec(name)
      for location in (spec.submodule_search_locations or []) if spec else []:
        self._roots.append(os.path.join(os.path.realpath(location), ''))

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.ERROR:
      return True
    path = _realpath(record.pathname or '')
    return not any(path.startswith(root) for root in self._roots)


class _BelowErrorFilter(logging.Filter):
  """Drops every record below ERROR.

  A filter rather than a level: `analysis.read_scalars` sets the TensorBoard
  logger's level itself while it reads the event files.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


class _ReportedByUsFilter(logging.Filter):
  """Drops TensorFlow's "Model diverged with loss = NaN" error line.

  The search reports a non-finite loss itself, in its one-line error that
  also names the step and the checkpoint to resume from.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith('Model diverged with loss')


_installed = False


def quiet_python(verbosity: Optional[int]) -> None:
  """Hides TensorFlow's Python-side chatter unless `verbosity` is debug.

  Idempotent. The tools' own absl log lines (progress, where outputs went)
  are kept. Warning filters given with python -W or PYTHONWARNINGS win over
  the ones added here.

  Args:
    verbosity: the parsed --verbosity flag.
  """
  global _installed
  if wants_debug(verbosity) or _installed:
    return
  _installed = True
  logging.getLogger('tensorflow').setLevel(logging.ERROR)
  logging.getLogger('tensorflow').addFilter(_ReportedByUsFilter())
  logging.getLogger('absl').addFilter(_LibraryChatterFilter())
  logging.getLogger('tensorboard').addFilter(_BelowErrorFilter())
  # Its modules log to child loggers, which a filter here would not see.
  logging.getLogger('matplotlib').setLevel(logging.ERROR)
  if not sys.warnoptions:
    for category in (DeprecationWarning, PendingDeprecationWarning,
                     FutureWarning):
      warnings.simplefilter('ignore', category)
    warnings.filterwarnings(
        'ignore', module=r'(%s)(\.|$)' % '|'.join(_LIBRARIES))


quiet_cpp()
