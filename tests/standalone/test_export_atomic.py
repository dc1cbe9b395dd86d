"""A re-export replaces the earlier export whole, or leaves it untouched."""

import json
import os
import shutil

import pytest
import tensorflow as tf
from absl import flags

from bin import cli
from bin import export_model
from tests.standalone import test_export
from tests.files import rewrite_checkpoint_without
from tests.files import snapshot
from tunas_search.runtime import tflite as tflite_lib
from tunas_search.standalone import export
from tunas_search.config.export import ExportOptions

LEFTOVERS = ('.export' + export.TEMPORARY_SUFFIX,
             '.export' + export.ASIDE_SUFFIX)



@pytest.fixture(scope='module')
def first_export(tmp_path_factory):
  """A train_eval run and a complete export of it (with TFLite)."""
  base = tmp_path_factory.mktemp('atomic')
  test_export.write_run(base / 'run')
  export.export_run(str(base / 'run'), str(base / 'golden'))
  return str(base / 'run'), str(base / 'golden')


@pytest.fixture
def earlier(first_export, tmp_path):
  """(run dir, export dir holding a copy of the first export, its files)."""
  run_dir, golden = first_export
  export_dir = str(tmp_path / 'export')
  shutil.copytree(golden, export_dir)
  return run_dir, export_dir, snapshot(export_dir)


def _fail_conversion(exception):
  def convert(saved_model_dir):
    # Fails once the SavedModel is already written: mid-export.
    assert os.path.exists(os.path.join(saved_model_dir, 'saved_model.pb'))
    raise exception
  return convert


def _assert_unchanged(export_dir, files):
  assert snapshot(export_dir) == files
  assert sorted(os.listdir(os.path.dirname(export_dir))) == ['export']


def test_failed_reexport_leaves_the_earlier_export_unchanged(earlier,
                                                             monkeypatch):
  run_dir, export_dir, files = earlier
  assert set(files) >= {'export_info.json', 'model.tflite',
                        'saved_model/saved_model.pb'}
  monkeypatch.setattr(tflite_lib, 'saved_model_to_tflite',
                      _fail_conversion(RuntimeError('injected')))
  with pytest.raises(RuntimeError, match='injected'):
    export.export_run(run_dir, export_dir)
  _assert_unchanged(export_dir, files)


def test_write_error_is_an_export_failed_error(earlier, monkeypatch):
  run_dir, export_dir, files = earlier
  monkeypatch.setattr(tflite_lib, 'saved_model_to_tflite', _fail_conversion(
      OSError(28, 'No space left on device')))
  with pytest.raises(export.ExportFailedError,
                     match='No space left on device') as error:
    export.export_run(run_dir, export_dir)
  assert '\n' not in str(error.value)
  _assert_unchanged(export_dir, files)


def test_successful_reexport_replaces_the_earlier_one(earlier):
  run_dir, export_dir, files = earlier
  result = export.export_run(run_dir, export_dir,
                             options=ExportOptions(tflite=False))
  after = snapshot(export_dir)
  assert 'model.tflite' not in after  # Replaced whole, not merged.
  assert json.loads(after['export_info.json'])['tflite_path'] is None
  assert after['saved_model/saved_model.pb'] == files[
      'saved_model/saved_model.pb']
  assert result.saved_model_dir == os.path.join(export_dir, 'saved_model')
  assert sorted(os.listdir(os.path.dirname(export_dir))) == ['export']


def test_failed_swap_puts_the_earlier_export_back(earlier, monkeypatch):
  run_dir, export_dir, files = earlier
  rename = tf.io.gfile.rename

  def failing_rename(source, target, overwrite=False):
    if source.endswith(export.TEMPORARY_SUFFIX):  # Moving the new one in.
      raise tf.errors.PermissionDeniedError(None, None, 'injected')
    rename(source, target, overwrite)
  monkeypatch.setattr(tf.io.gfile, 'rename', failing_rename)
  with pytest.raises(export.ExportFailedError, match='injected'):
    export.export_run(run_dir, export_dir)
  _assert_unchanged(export_dir, files)


def test_leftovers_of_a_killed_export_are_removed(earlier):
  run_dir, export_dir, files = earlier
  parent = os.path.dirname(export_dir)
  for name in LEFTOVERS:
    os.makedirs(os.path.join(parent, name, 'saved_model'))
  export.export_run(run_dir, export_dir)
  assert sorted(os.listdir(parent)) == ['export']
  assert set(snapshot(export_dir)) == set(files)


def test_export_killed_between_the_renames_is_restored(earlier, monkeypatch):
  run_dir, export_dir, files = earlier
  parent = os.path.dirname(export_dir)
  # The state a kill after `_swap_in`'s first rename leaves: the earlier
  # export aside, a complete new one still in the temporary dir.
  os.rename(export_dir, os.path.join(parent, LEFTOVERS[1]))
  os.makedirs(os.path.join(parent, LEFTOVERS[0], 'saved_model'))
  monkeypatch.setattr(tflite_lib, 'saved_model_to_tflite',
                      _fail_conversion(RuntimeError('injected')))
  with pytest.raises(RuntimeError, match='injected'):
    export.export_run(run_dir, export_dir)
  _assert_unchanged(export_dir, files)


def test_a_dir_that_is_not_an_export_is_refused_untouched(first_export,
                                                         tmp_path):
  run_dir, _ = first_export
  (tmp_path / 'mine').mkdir()
  (tmp_path / 'mine' / 'notes.txt').write_text('keep me')
  with pytest.raises(export.ExportError,
                     match=r'is not a SavedModel export \(it holds notes.txt'):
    export.export_run(run_dir, str(tmp_path / 'mine'))
  assert snapshot(tmp_path) == {'mine/notes.txt': b'keep me'}


def test_export_dir_under_a_file_writes_nothing(first_export, tmp_path):
  run_dir, _ = first_export
  (tmp_path / 'file').write_text('x')
  with pytest.raises(export.ExportError, match='cannot write export dir .*'
                     'is not a directory'):
    export.export_run(run_dir, str(tmp_path / 'file' / 'export'))
  assert snapshot(tmp_path) == {'file': b'x'}


def _export_cli(*args):
  flag_values = flags.FlagValues()
  export_model.define_flags(flag_values)
  flag_values(['export_model.py', *args])
  export_model.main(['export_model.py'], flag_values)


def test_cli_export_dir_under_a_file_is_a_usage_error(first_export, tmp_path):
  run_dir, _ = first_export
  (tmp_path / 'file').write_text('x')
  with pytest.raises(cli.UsageError, match=(
      r'^--export_dir=\S+/file/out: \S+/file is a file, not a directory$')):
    _export_cli(f'--model_dir={run_dir}',
                f'--export_dir={tmp_path / "file" / "out"}')
  assert snapshot(tmp_path) == {'file': b'x'}


def test_cli_failure_part_way_is_one_line_exit_1(earlier, monkeypatch,
                                                 capsys):
  run_dir, export_dir, files = earlier
  monkeypatch.setattr(tflite_lib, 'saved_model_to_tflite', _fail_conversion(
      OSError(28, 'No space left on device')))
  with pytest.raises(SystemExit) as exit_info:
    _export_cli(f'--model_dir={run_dir}', f'--export_dir={export_dir}')
  assert exit_info.value.code == cli.FAILURE_EXIT_CODE
  captured = capsys.readouterr()
  assert captured.out == ''
  (line,) = captured.err.splitlines()
  assert line.endswith('No space left on device; the earlier export, if '
                       'any, is unchanged')
  _assert_unchanged(export_dir, files)


def test_missing_checkpoint_lists_the_runs_checkpoints_and_writes_nothing(
    earlier):
  run_dir, export_dir, files = earlier
  names = sorted(n[:-len('.index')] for n in os.listdir(run_dir)
                 if n.endswith('.index'))
  assert names  # The run has a checkpoint to name.
  missing = os.path.join(run_dir, 'model.ckpt-999999')
  with pytest.raises(export.ExportError) as error:
    export.export_run(run_dir, export_dir, checkpoint=missing)
  message = str(error.value)
  assert message == (f'{missing} is not a checkpoint of {run_dir}; '
                     f'checkpoints: {", ".join(names)}')
  assert '\n' not in message
  _assert_unchanged(export_dir, files)


def test_checkpoint_lacking_a_variable_names_it(first_export, tmp_path):
  run_dir = str(tmp_path / 'run')
  shutil.copytree(first_export[0], run_dir)
  latest = tf.train.latest_checkpoint(run_dir)
  names = tf.train.load_checkpoint(latest).get_variable_to_shape_map()
  missing = sorted(n for n in names if n.endswith('/kernel'))[0]
  rewrite_checkpoint_without(latest, missing)
  with pytest.raises(export.ExportError) as error:
    export.export_run(run_dir, str(tmp_path / 'export'))
  assert str(error.value) == (
      f'checkpoint {latest} has no variable {missing}, which this graph has: '
      'it was written by another tunas_search version or graph; export it '
      'with that version')
  assert not os.path.exists(tmp_path / 'export')


def test_an_unfinished_save_is_not_exported(tmp_path):
  # A train_eval run killed while saving step 8: the export takes the
  # recorded checkpoint (7), and refuses the unfinished one by name.
  from tests import killed_saves  # pylint: disable=g-import-not-at-top
  run_dir = str(tmp_path / 'run')
  test_export.write_run(run_dir)
  killed_saves.kill_save(run_dir, 'empty_index', 'model.ckpt-7', 8)
  assert export.export_run(run_dir, str(tmp_path / 'out'),
                           options=ExportOptions(tflite=False)).global_step == 7
  unfinished = os.path.join(run_dir, 'model.ckpt-8')
  with pytest.raises(export.ExportError) as error:
    export.export_run(run_dir, str(tmp_path / 'other'), checkpoint=unfinished)
  assert str(error.value) == (
      f'{unfinished} is not a checkpoint of {run_dir} (its save did not '
      'finish); checkpoints: model.ckpt-7')
  assert not os.path.exists(tmp_path / 'other')
