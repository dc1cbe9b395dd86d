"""Every bin/ tool: bad input is one stderr line, TensorFlow's chatter hidden.

The tools run as subprocesses without TF_CPP_MIN_LOG_LEVEL in their
environment (conftest.py sets it for the tests themselves), so that what a
user sees is what is tested.
"""

import importlib.util
import logging
import os
import subprocess
import sys
import warnings

import pytest

from bin import _quiet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
# Only stops a hung tool; not a speed requirement, so generous enough for a
# slow, loaded machine (most runs import TensorFlow).
HANG_GUARD_S = 600


def user_env():
  """The environment of a user who set nothing: TensorFlow at its defaults."""
  env = dict(os.environ)
  for name in (_quiet.CPP_LOG_LEVEL_VAR, 'PYTHONWARNINGS'):
    env.pop(name, None)
  return env


def run_tool(tool, *args, cwd=ROOT):
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, 'bin', f'{tool}.py'), *args],
      capture_output=True, text=True, env=user_env(), cwd=cwd,
      timeout=HANG_GUARD_S)


def assert_one_line_error(done, tool, message, exit_code=2):
  assert done.returncode == exit_code, done.stderr
  assert done.stdout == ''
  assert 'Traceback' not in done.stderr
  lines = done.stderr.splitlines()
  assert len(lines) == 1, done.stderr
  assert lines[0].startswith(f'{tool}.py: error: ')
  assert message in lines[0]


# (tool, arguments, part of the message). Rejected by absl's parser, or by
# the tool after TensorFlow is imported (those reach TensorFlow's start-up).
BAD_INPUT = [
    ('analyze_search', ['--step=abc'], "flag --step=abc: invalid literal"),
    ('analyze_search', ['--format=xml'], "unknown --format 'xml'"),
    ('describe_arch', ['--image_size=abc'], 'flag --image_size=abc'),
    ('export_model', ['--tflite=maybe'], 'flag --tflite=maybe'),
    ('export_model', ['--quantize=int4'], 'flag --quantize=int4: value '
     'should be one of <none|float16|dynamic|int8>'),
    ('export_model', ['--model_dir=/nonexistent/run'],
     '/nonexistent/run holds no train_eval run'),
    ('sample_random', ['--num_samples=abc'], 'flag --num_samples=abc'),
    ('train_eval', ['--mode=nope'], 'flag --mode=nope: value should be one'),
    ('train_eval', ['--model_dir=/tmp/x', '--format=xml'],
     "unknown --format 'xml'"),
    # bin/search.py is quiet through bin/cli.py, which it imports before
    # anything that loads TensorFlow; importing bin._quiet first keeps it so
    # whatever its imports become.
    ('search', ['--validation_weights=nope'],
     'flag --validation_weights=nope: value should be one'),
    # An empty value would read as the flag left out.
    ('analyze_search', ['--model_dir=/tmp/x', '--plot='],
     '--plot is empty; give a value or leave the flag out'),
    ('sample_random', ['--cost_model=measured', '--cost_model_file='],
     '--cost_model_file is empty; give a value or leave the flag out'),
    ('describe_arch', ['--search_space=mobilenet_v2', '--cost_model_file='],
     '--cost_model_file is empty'),
    ('export_model', ['--model_dir=/tmp/x', '--checkpoint='],
     '--checkpoint is empty'),
]


@pytest.mark.parametrize('tool,args,message', BAD_INPUT,
                         ids=[f'{t}{a}' for t, a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2(tool, args, message):
  assert_one_line_error(run_tool(tool, *args), tool, message)


def test_unwritable_and_too_small_inputs_are_one_line(tmp_path):
  """Issue 8.4: each CLI that writes, and describe_arch's --image_size."""
  (tmp_path / 'file').write_text('x')
  under_file = str(tmp_path / 'file' / 'out')
  cases = [
      ('export_model', [f'--model_dir={tmp_path}',
                        f'--export_dir={under_file}'],
       f'--export_dir={under_file}: {tmp_path / "file"} is a file'),
      ('analyze_search', [f'--model_dir={tmp_path}',
                          f'--plot={under_file}.png'],
       f'--plot={under_file}.png: {tmp_path / "file"} is a file'),
      ('train_eval', ['--search_space=proxylessnas_mobile', '--max_steps=1',
                      f'--model_dir={under_file}'],
       f'--model_dir={under_file}: {tmp_path / "file"} is a file'),
      ('describe_arch', ['--search_space=mobilenet_v2', '--image_size=27'],
       'image_size 27 is outside the valid range 28..512'),
  ]
  for tool, args, message in cases:
    assert_one_line_error(run_tool(tool, *args, cwd=tmp_path), tool, message)
  assert os.listdir(tmp_path) == ['file']  # Nothing written, anywhere.


@pytest.mark.parametrize('argv,expected', [
    (['t'], None),
    (['t', '--verbosity=1'], 1),
    (['t', '--verbosity', '2'], 2),
    (['t', '-v', '1', '--format=json'], 1),
    (['t', '-v=-1'], -1),
    (['t', '--verbosity=1', '--verbosity=0'], 0),  # absl: the last wins.
    (['t', '--verbosity=abc'], None),  # absl reports it.
    (['t', '-v'], None),
    (['t', '--', '--verbosity=1'], None),  # Not a flag after `--`.
])
def test_requested_verbosity(argv, expected):
  assert _quiet.requested_verbosity(argv) == expected


@pytest.mark.parametrize('argv,preset,expected', [
    (['t'], None, '2'),
    (['t', '--verbosity=0'], None, '2'),
    (['t', '--verbosity=1'], None, None),  # TensorFlow's default: all.
    (['t'], '0', '0'),  # The user's own setting wins.
    (['t', '--verbosity=1'], '3', '3'),
])
def test_quiet_cpp(monkeypatch, argv, preset, expected):
  if preset is None:
    monkeypatch.delenv(_quiet.CPP_LOG_LEVEL_VAR, raising=False)
  else:
    monkeypatch.setenv(_quiet.CPP_LOG_LEVEL_VAR, preset)
  _quiet.quiet_cpp(argv)
  assert os.environ.get(_quiet.CPP_LOG_LEVEL_VAR) == expected


@pytest.fixture
def restored_logging(monkeypatch):
  """Undoes quiet_python's changes to this process's logging after a test."""
  monkeypatch.setattr(_quiet, '_installed', False)
  for name in ('absl', 'tensorboard'):
    logger = logging.getLogger(name)
    monkeypatch.setattr(logger, 'filters', list(logger.filters))
  tf_logger = logging.getLogger('tensorflow')
  level = tf_logger.level
  yield
  tf_logger.setLevel(level)


def _passes(logger_name, level, pathname):
  """Whether a record would pass `logger_name`'s filters."""
  record = logging.LogRecord(logger_name, level, pathname, 1, 'message', (),
                             None)
  return bool(logging.getLogger(logger_name).filter(record))


def test_quiet_python_keeps_the_tools_lines_only(restored_logging):
  del restored_logging
  # Where TensorFlow's saved_model/load.py logs "Fingerprint not found".
  tf_dir = importlib.util.find_spec('tensorflow').submodule_search_locations[0]
  tf_file = os.path.join(tf_dir, 'python', 'saved_model', 'load.py')
  tool_file = os.path.join(ROOT, 'bin', 'export_model.py')
  with warnings.catch_warnings():
    _quiet.quiet_python(None)
    assert not _passes('absl', logging.INFO, tf_file)
    assert not _passes('absl', logging.WARNING, tf_file)
    assert _passes('absl', logging.ERROR, tf_file)
    assert _passes('absl', logging.INFO, tool_file)
    # TensorBoard's event-file reader, e.g. "Found more than one graph
    # event per run", whatever level analysis.read_scalars gives it.
    assert not _passes('tensorboard', logging.WARNING, tf_file)
    assert _passes('tensorboard', logging.ERROR, tf_file)
    assert logging.getLogger('tensorflow').level == logging.ERROR
    with warnings.catch_warnings(record=True) as caught:
      warnings.warn('old API', DeprecationWarning)
      warnings.warn('a real problem', UserWarning)
    if not sys.warnoptions:  # python -W ... would win (by design).
      assert [str(w.message) for w in caught] == ['a real problem']


def test_quiet_python_at_debug_verbosity_changes_nothing(restored_logging):
  del restored_logging
  filters = list(logging.getLogger('absl').filters)
  with warnings.catch_warnings():
    _quiet.quiet_python(_quiet.DEBUG_VERBOSITY)
    assert logging.getLogger('absl').filters == filters
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('default')
      warnings.warn('old API', DeprecationWarning)
    assert len(caught) == 1


def test_tensorflows_nan_line_is_dropped_as_the_search_reports_it():
  drop = _quiet._ReportedByUsFilter()  # pylint: disable=protected-access
  def record(message):
    return logging.LogRecord('tensorflow', logging.ERROR, __file__, 1,
                             message, None, None)
  assert not drop.filter(record('Model diverged with loss = NaN.'))
  assert drop.filter(record('Some other error'))
