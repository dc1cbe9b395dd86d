"""bin/train_eval.py: --use_bfloat16 follows the space; unwritable dirs."""

import os

from absl import flags
import pytest

from bin import cli
from bin import train_eval as train_eval_cli


def _build(*args):
  flag_values = flags.FlagValues()
  train_eval_cli.define_flags(flag_values)
  flag_values(['train_eval.py'] + list(args))
  config, _ = train_eval_cli.build_config(flag_values)
  return config


@pytest.mark.parametrize('args, expected', [
    # docs/method.md section 2: bfloat16 by default for mobilenet_v3_like_search only.
    (['--search_space=mobilenet_v3_like_search'], True),
    (['--search_space=mobilenet_v3_like_search', '--nouse_bfloat16'], False),
    (['--search_space=mobilenet_v3_like_search', '--use_bfloat16=False'],
     False),
    (['--search_space=proxylessnas_mobile'], False),
    (['--search_space=proxylessnas_mobile', '--use_bfloat16'], True),
    (['--search_space=mobilenet_v3_large'], False),
])
def test_use_bfloat16_auto_follows_the_space(tmp_path, args, expected):
  config = _build(f'--model_dir={tmp_path}', '--max_steps=1', *args)
  assert config.use_bfloat16 is expected
  assert config.weight_decay == (3e-5 if expected else 4e-5)


def test_auto_bool_flag_values():
  assert cli.resolve_auto_bool(cli.AUTO, True) is True
  assert cli.resolve_auto_bool(cli.AUTO, False) is False
  assert cli.resolve_auto_bool(cli.TRUE, False) is True
  assert cli.resolve_auto_bool(cli.FALSE, True) is False
  with pytest.raises(flags.IllegalFlagValueError,
                     match="'maybe' is not auto, true or false"):
    _build('--use_bfloat16=maybe')


def test_model_dir_under_a_file_is_a_usage_error(tmp_path):
  (tmp_path / 'file').write_text('x')
  with pytest.raises(cli.UsageError, match=(
      f'^--model_dir={tmp_path}/file/run: {tmp_path}/file is a file, not a '
      'directory$')):
    _build(f'--model_dir={tmp_path / "file" / "run"}', '--max_steps=1',
           '--search_space=proxylessnas_mobile')
  assert os.listdir(tmp_path) == ['file']


def test_read_only_model_dir_is_a_usage_error(tmp_path, monkeypatch):
  # Simulated: the tests may run as root, whom no permission bit stops.
  monkeypatch.setattr(os, 'access', lambda path, mode: not mode & os.W_OK)
  with pytest.raises(cli.UsageError, match=(
      f'^--model_dir={tmp_path}/run: directory {tmp_path} is not '
      'writable$')):
    _build(f'--model_dir={tmp_path / "run"}', '--max_steps=1',
           '--search_space=proxylessnas_mobile')


def _main(*args):
  """Runs main in-process: what it raises is what the tool prints."""
  flag_values = flags.FlagValues()
  train_eval_cli.define_flags(flag_values)
  flag_values(['train_eval.py'] + list(args))
  train_eval_cli.main(['train_eval.py'], flag_values)


@pytest.fixture(scope='module')
def train_eval_dir(tmp_path_factory):
  """A train_eval run's model dir (config and spec; no checkpoint needed)."""
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  from tunas_search.standalone import train_eval  # pylint: disable=g-import-not-at-top
  model_dir = tmp_path_factory.mktemp('train_eval')
  train_eval.prepare(test_train_eval.make_config(model_dir),
                     test_train_eval.SPEC)
  return str(model_dir)


_MOBILE = ['--search_space=proxylessnas_mobile', '--max_steps=1']


@pytest.mark.parametrize('args, message', [
    # Refused by the run's checks: the new model dir is never created.
    (['--mode=evaluate'], 'nothing to evaluate: {model_dir} has no '
     'checkpoint; train first'),
    (['--init_from_search=/nonexistent'],
     'init_from_search: model dir /nonexistent does not exist'),
    (['--resume_from=model.ckpt-3'],
     '--resume_from=model.ckpt-3: model dir {model_dir} does not exist'),
    (['--init_from_search={train_eval_dir}'],
     'init_from_search: {train_eval_dir} holds a train_eval run, not a '
     'search'),
    # Refused when the flags are read.
    (['--num_replicas=0'], 'num_replicas must be positive, got 0'),
    (['--image_size=0'], 'image_size 0 is outside the valid range 28..512'),
    (['--seed=-1'], 'seed must be >= 0, got -1'),
])
def test_refused_runs_leave_no_model_dir(tmp_path, train_eval_dir, args,
                                         message):
  model_dir = tmp_path / 'new' / 'run'
  args = [a.format(train_eval_dir=train_eval_dir) for a in args]
  with pytest.raises(cli.UsageError) as error:
    _main(f'--model_dir={model_dir}', *_MOBILE, *args)
  assert str(error.value).startswith(message.format(
      model_dir=model_dir, train_eval_dir=train_eval_dir)), error.value
  assert '\n' not in str(error.value)
  assert os.listdir(tmp_path) == []


def test_search_model_dir_of_a_train_eval_run_is_refused(tmp_path,
                                                         train_eval_dir):
  with pytest.raises(cli.UsageError, match=(
      f'^--search_model_dir: {train_eval_dir} holds a train_eval run, not a '
      'search$')):
    _build(f'--model_dir={tmp_path / "run"}', '--max_steps=1',
           f'--search_model_dir={train_eval_dir}')
  assert os.listdir(tmp_path) == []
