"""bin/export_model.py: bad input (--checkpoint, --quantize, a run without
its data) is one line, and nothing is written."""

import json
import os

from absl import flags
import pytest

from bin import cli
from bin import export_model
from tests.standalone import test_export
from tests.files import snapshot
from tunas_search.standalone import export


@pytest.fixture(scope='module')
def run_dir(tmp_path_factory):
  """A train_eval run with checkpoint model.ckpt-7."""
  model_dir = tmp_path_factory.mktemp('run')
  test_export.write_run(model_dir)
  return str(model_dir)


def _main(*args):
  flag_values = flags.FlagValues()
  export_model.define_flags(flag_values)
  flag_values(['export_model.py', *args])
  export_model.main(['export_model.py'], flag_values)


@pytest.mark.parametrize('checkpoint, message', [
    # As --resume_from: the value and the run's checkpoints, exit 2.
    ('{run}/model.ckpt-99', '--checkpoint={run}/model.ckpt-99 is not a '
     'checkpoint of {run}; checkpoints: model.ckpt-7'),
    # A file of the run that is no checkpoint.
    ('{run}/config.json', '--checkpoint={run}/config.json is not a '
     'checkpoint of {run}; checkpoints: model.ckpt-7'),
    ('model.ckpt-7.index', '--checkpoint=model.ckpt-7.index is not a '
     'checkpoint of {run}'),
])
def test_bad_checkpoint_is_one_line_and_exports_nothing(run_dir, checkpoint,
                                                         message):
  before = snapshot(run_dir)
  with pytest.raises(cli.UsageError) as error:
    _main(f'--model_dir={run_dir}',
          f'--checkpoint={checkpoint.format(run=run_dir)}')
  assert str(error.value).startswith(message.format(run=run_dir))
  assert '\n' not in str(error.value)
  assert snapshot(run_dir) == before


def test_checkpoint_relative_to_the_run(run_dir, capsys):
  _main(f'--model_dir={run_dir}', '--checkpoint=model.ckpt-7', '--notflite')
  assert f'"checkpoint": "{os.path.join(run_dir, "model.ckpt-7")}"' in (
      capsys.readouterr().out)


def test_bad_quantize_is_one_line_naming_the_choices(run_dir):
  before = snapshot(run_dir)
  with pytest.raises(flags.Error) as error:
    _main(f'--model_dir={run_dir}', '--quantize=int4')
  # cli.run prints the first line: the value and the valid choices.
  assert str(error.value).splitlines()[0] == (
      'flag --quantize=int4: value should be one of '
      '<none|float16|dynamic|int8>')
  assert snapshot(run_dir) == before


def test_int8_io_without_int8_is_one_line(run_dir):
  before = snapshot(run_dir)
  with pytest.raises(cli.UsageError, match='int8_io needs quantize=int8, '
                     'got quantize=dynamic') as error:
    _main(f'--model_dir={run_dir}', '--quantize=dynamic', '--int8_io')
  assert '\n' not in str(error.value)
  assert snapshot(run_dir) == before


@pytest.mark.parametrize('args', [['--quantize=int8'], [],
                                  ['--quantize=int8', '--noevaluate']])
def test_run_without_its_data_is_one_line(tmp_path, args):
  """A run whose dataset is not here: calibration and evaluation need it."""
  run = tmp_path / 'run'
  test_export.write_run(run)
  config = json.loads((run / 'config.json').read_text())
  config['dataset'] = f'folder:{tmp_path / "gone"}'
  (run / 'config.json').write_text(json.dumps(config))
  before = snapshot(str(tmp_path))
  with pytest.raises(cli.UsageError) as error:
    _main(f'--model_dir={run}', *args)
  message = str(error.value)
  assert '\n' not in message
  assert message.startswith("the run's data is not readable here")
  assert str(tmp_path / 'gone') in message
  assert ('int8 calibration' in message) == ('--quantize=int8' in args)
  assert ('--noevaluate skips it' in message) == ('--noevaluate' not in args)
  assert snapshot(str(tmp_path)) == before
  assert sorted(os.listdir(tmp_path)) == ['run']


def test_drop_over_the_threshold_is_one_warning_line():
  result = export.ExportResult(
      export_dir='/e', saved_model_dir='/e/s', tflite_path='/e/m',
      checkpoint='/r/model.ckpt-7', global_step=7, search_space='tiny',
      architecture='0', input_shape=[-1, 28, 28, 1], mean=None, std=None,
      quantize='int8', accuracy={
          'images': 2000, 'split': 'test', 'top_k': 5,
          'float32': {'top1': 0.75, 'top5': 0.9},
          'int8': {'top1': 0.7, 'top5': 0.9, 'top1_agreement': 0.9,
                   'top1_drop_points': 5.0}})
  assert export.accuracy_warning(result, 1.0) == (
      "the int8 model's top-1 is 70.00%, 5.00 points below the float "
      "model's 75.00% (over --max_top1_drop=1; top-1 agreement 90.00%, on "
      '2000 test images)')
  assert export.accuracy_warning(result, 5.0) is None
