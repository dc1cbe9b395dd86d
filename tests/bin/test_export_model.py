"""bin/export_model.py: a bad --checkpoint is one line naming the run's."""

import os

from absl import flags
import pytest

from bin import cli
from bin import export_model
from tests.standalone import test_export
from tests.files import snapshot


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
