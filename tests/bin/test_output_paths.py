"""Unwritable output paths are one-line usage errors and nothing is written.

Read-only directories are simulated by making `os.access` deny writing: the
tests may run as root, for whom no permission bit denies anything.
"""

import os
import re

import pytest
from absl import flags

import search_spaces
from bin import analyze_search
from bin import cli
from bin import export_model
from tests.results import test_analysis as fake
from tunas_search.results import analysis
from tunas_search.results import render as report
from tunas_search.space import schema


@pytest.fixture
def read_only(monkeypatch):
  """Makes every directory look read-only to the checks."""
  real_access = os.access

  def access(path, mode, **kwargs):
    if mode & os.W_OK:
      return False
    return real_access(path, mode, **kwargs)
  monkeypatch.setattr(os, 'access', access)


def test_check_output_dir(tmp_path):
  (tmp_path / 'file').write_text('x')
  cli.check_output_dir('model_dir', str(tmp_path / 'new' / 'deeper'))
  cli.check_output_dir('model_dir', str(tmp_path))
  cli.check_output_dir('model_dir', 'gs://bucket/run')  # Left to GCS.
  for path in (tmp_path / 'file', tmp_path / 'file' / 'sub' / 'deeper'):
    with pytest.raises(cli.UsageError, match=(
        f'^--model_dir={path}: {tmp_path / "file"} is a file, not a '
        'directory$')):
      cli.check_output_dir('model_dir', str(path))
  assert os.listdir(tmp_path) == ['file']


def test_check_output_dir_read_only(tmp_path, read_only):
  del read_only
  with pytest.raises(cli.UsageError, match=(
      f'^--model_dir={tmp_path}/run: directory {tmp_path} is not '
      'writable$')):
    cli.check_output_dir('model_dir', str(tmp_path / 'run'))


def test_check_output_file(tmp_path):
  (tmp_path / 'file').write_text('x')
  cli.check_output_file('plot', str(tmp_path / 'a.png'))
  cli.check_output_file('plot', str(tmp_path / 'file'))  # Replaced.
  cases = [
      (tmp_path / 'file' / 'a.png', f'{tmp_path / "file"} is a file, not a '
       'directory'),
      (tmp_path / 'no' / 'a.png', f'directory {tmp_path / "no"} does not '
       'exist'),
      (tmp_path, 'is a directory, not a file'),
      ('gs://bucket/a.png', 'must be a local file'),
  ]
  for path, message in cases:
    with pytest.raises(cli.UsageError, match=f'^--plot={path}:? {message}$'):
      cli.check_output_file('plot', str(path))


def test_check_output_file_read_only(tmp_path, read_only):
  del read_only
  with pytest.raises(cli.UsageError, match=f'directory {tmp_path} is not '
                     'writable$'):
    cli.check_output_file('plot', str(tmp_path / 'a.png'))


def test_atomic_output_file_without_an_extension(tmp_path):
  path = tmp_path / 'history'
  with cli.atomic_output_file(str(path)) as temporary:
    # A dot before the pid would give matplotlib an extension to read.
    assert os.path.splitext(temporary)[1] == ''
    open(temporary, 'wb').close()
  with cli.atomic_output_file(str(path), default_extension='.png') as temporary:
    assert temporary.endswith('.png')
    open(temporary, 'wb').close()
  assert os.listdir(tmp_path) == ['history']


def test_atomic_output_file(tmp_path):
  path = tmp_path / 'history.png'
  path.write_bytes(b'earlier')
  with pytest.raises(OSError, match='injected'):
    with cli.atomic_output_file(str(path)) as temporary:
      assert temporary.endswith('.png')  # matplotlib reads the format.
      with open(temporary, 'wb') as f:
        f.write(b'half')
      raise OSError('injected')
  assert path.read_bytes() == b'earlier'
  assert os.listdir(tmp_path) == ['history.png']
  with cli.atomic_output_file(str(path)) as temporary:
    with open(temporary, 'wb') as f:
      f.write(b'new')
  assert path.read_bytes() == b'new'
  assert os.listdir(tmp_path) == ['history.png']


@pytest.fixture(scope='module')
def search_dir(tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp('search'))
  spec = search_spaces.get(fake.SPACE).spec()
  decisions = schema.decisions(spec)
  fake.write_search_files(model_dir, spec)
  fake.write_checkpoint(model_dir, decisions,
                        fake.random_logits(decisions, 0), 30)
  return model_dir


def _analyze(*args):
  flag_values = flags.FlagValues()
  analyze_search.define_flags(flag_values)
  flag_values(['analyze_search.py', *args])
  analyze_search.main(['analyze_search.py'], flag_values)


def test_plot_format_checked_before_any_work(search_dir, tmp_path,
                                             monkeypatch):
  monkeypatch.setattr(analysis, 'load_search', None)  # Never reached.
  with pytest.raises(cli.UsageError, match=(
      "unknown image format 'xyz'; valid choices: .*png")):
    _analyze(f'--model_dir={search_dir}', f'--plot={tmp_path / "h.xyz"}')
  assert os.listdir(tmp_path) == []


def test_plot_without_an_extension_is_a_png(search_dir, tmp_path, capsys):
  plot = tmp_path / 'history'
  _analyze(f'--model_dir={search_dir}', f'--plot={plot}')
  capsys.readouterr()
  with open(plot, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  assert os.listdir(tmp_path) == ['history']  # No temporary left behind.


def _regular_file(path):
  path.write_text('x')
  return path


def _train_eval_dir(path):
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  train_eval.prepare(test_train_eval.make_config(path), test_train_eval.SPEC)
  return path


@pytest.mark.parametrize('make, message', [
    (_regular_file, 'model dir {path} is a file, not a directory'),
    # A train_eval run's dir: said as such, not its fields listed.
    (_train_eval_dir, '{path} holds a train_eval run, not a search'),
])
def test_model_dir_that_is_no_search(tmp_path, make, message):
  path = make(tmp_path / 'run')
  with pytest.raises(cli.UsageError, match=(
      '^' + re.escape(message.format(path=path)) + '$')):
    _analyze(f'--model_dir={path}')


def test_plot_in_read_only_dir_checked_before_any_work(
    search_dir, tmp_path, read_only, monkeypatch):
  del read_only
  monkeypatch.setattr(analysis, 'load_search', None)  # Never reached.
  with pytest.raises(cli.UsageError, match='is not writable'):
    _analyze(f'--model_dir={search_dir}', f'--plot={tmp_path / "h.png"}')
  assert os.listdir(tmp_path) == []


def test_plot_failure_part_way_is_exit_1_and_keeps_the_earlier_plot(
    search_dir, tmp_path, monkeypatch, capsys):
  plot = tmp_path / 'h.png'
  plot.write_bytes(b'earlier plot')

  def failing_plot(path, *args, **kwargs):
    del args, kwargs
    with open(path, 'wb') as f:
      f.write(b'half a plot')
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(report, 'plot_history', failing_plot)
  with pytest.raises(SystemExit) as exit_info:
    _analyze(f'--model_dir={search_dir}', f'--plot={plot}')
  assert exit_info.value.code == cli.FAILURE_EXIT_CODE
  captured = capsys.readouterr()
  assert captured.out == ''
  (line,) = captured.err.splitlines()
  assert line.endswith(f'error: cannot write --plot={plot}: No space left '
                       'on device')
  assert plot.read_bytes() == b'earlier plot'
  assert os.listdir(tmp_path) == ['h.png']


def test_export_dir_read_only(tmp_path, read_only):
  del read_only
  flag_values = flags.FlagValues()
  export_model.define_flags(flag_values)
  flag_values(['export_model.py', f'--model_dir={tmp_path}',
               f'--export_dir={tmp_path / "out"}'])
  with pytest.raises(cli.UsageError, match=(
      f'^--export_dir={tmp_path}/out: directory {tmp_path} is not '
      'writable$')):
    export_model.main(['export_model.py'], flag_values)
