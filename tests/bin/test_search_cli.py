"""bin/search.py: flags and presets become the right SearchConfig; bad input
gives one line and exit 2 before anything is written; a killed search resumes
when the same command is rerun (slow)."""

import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
from absl import flags

import search_spaces
from bin import search as search_cli
from tests.bin import one_process
from tests.files import snapshot
from tunas_search.config import SearchConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
SEARCH = os.path.join(ROOT, 'bin', 'search.py')


# Only against a hang: the runs here exit in seconds, but a slow machine
# sharing its CPU with other tests must not fail them.
HANG_GUARD_S = 600


def _run(*flags, timeout=HANG_GUARD_S):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env.pop('TF_CONFIG', None)
  return subprocess.run([sys.executable, SEARCH, *flags], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def _build_configs(command_lines):
  """SearchConfig (or 'error: ...') per command line, nothing run.

  In this process: bin/search.py's flags on a FlagValues of their own per
  command line, parsed as absl parses them (flagfiles included).
  """
  out = []
  for argv in command_lines:
    flag_values = flags.FlagValues()
    search_cli.define_flags(flag_values)
    flag_values(['search.py', *argv])
    try:
      out.append(search_cli.build_config(flag_values))
    except search_cli.cli.UsageError as e:
      out.append('error: ' + str(e))
  return out


_V3 = '--search_space=mobilenet_v3_like_search'
# (command line, expected use_bfloat16): auto is on for
# mobilenet_v3_like_search only (docs/method.md section 2); the absl boolean
# spellings still work.
_BFLOAT16_CASES = [
    ([], False),
    ([_V3], True),
    ([_V3, '--nouse_bfloat16'], False),
    ([_V3, '--use_bfloat16=false'], False),
    ([_V3, '--use_bfloat16=auto'], True),
    (['--use_bfloat16'], True),
    (['--use_bfloat16=true'], True),
    (['--search_space=proxylessnas_enlarged_search'], False),
]
# (preset, search space, use_bfloat16, cost target): the original runs.
_PRESETS = [
    ('imagenet_mobilenet_v3_like_tpu', 'mobilenet_v3_like_search', True, 57),
    ('imagenet_proxylessnas_tpu', 'proxylessnas_search', False, 84),
    ('imagenet_proxylessnas_enlarged_tpu', 'proxylessnas_enlarged_search',
     False, 84),
]


@pytest.fixture(scope='module')
def built(tmp_path_factory):
  model_dir = f'--model_dir={tmp_path_factory.mktemp("run")}'
  lines = [[model_dir, *flags] for flags, _ in _BFLOAT16_CASES]
  lines += [[model_dir, f'--flagfile={ROOT}/configs/{name}.cfg', '--tpu=x']
            for name, *_ in _PRESETS]
  configs = _build_configs(lines)
  return configs[:len(_BFLOAT16_CASES)], configs[len(_BFLOAT16_CASES):]


def test_use_bfloat16_auto_follows_the_search_space(built):
  for (flags, expected), config in zip(_BFLOAT16_CASES, built[0]):
    assert isinstance(config, SearchConfig), config
    assert config.use_bfloat16 is expected, flags
    # docs/method.md section 2: weight decay 3e-5 in bfloat16, else 4e-5.
    assert config.weight_decay == (3e-5 if expected else 4e-5), flags


def test_imagenet_presets_reproduce_the_original_runs(built):
  for (name, space, bfloat16, target), config in zip(_PRESETS, built[1]):
    assert isinstance(config, SearchConfig), (name, config)
    assert config.search_space == space, name
    # TuNAS's classifier has 1001 outputs (background class, docs/method.md section 2).
    assert (config.dataset, config.num_classes) == ('imagenet1001', 1001)
    assert config.num_train_examples == 1_231_121  # docs/method.md section 6.
    assert config.use_bfloat16 is bfloat16, name
    assert config.weight_decay == (3e-5 if bfloat16 else 4e-5), name
    assert (config.rl_cost_model_target, config.cost_model) == (
        target, 'pixel1_latency')
    assert (config.train_batch_size, config.num_replicas,
            config.total_steps) == (4096, 32, 27050)  # 90 epochs, down.
    assert config.effective_cost_model_space == space


# (flags, message): bad input, refused in one line before anything is
# written.
_BAD_INPUT = [
    # Only the spaces a search takes: no reference nets.
    (['--search_space=nasnet'], "unknown search space 'nasnet'; valid "
     f'choices: {", ".join(search_spaces.search_space_names())}, or '
     'MODULE:FUNCTION'),
    (['--ssd=nasnet'], "unknown search space 'nasnet'"),  # TuNAS's alias.
    (['--search_space=mobilenet_v2'],
     "'mobilenet_v2' is a reference architecture, not a search space"),
    (['--dataset=mnist'], "unknown dataset 'mnist'"),
    (['--dataset=imagenet'], "dataset 'imagenet' (TFDS imagenet2012) needs a "
     'data_dir'),
    (['--dataset=cifar10', '--data_dir=/nonexistent/tfds'],
     'data_dir /nonexistent/tfds does not exist'),
    (['--image_size=16'], 'image_size 16 is outside the valid range 28..512'),
    (['--use_tpu', '--tpu=x', '--num_replicas=8', '--train_batch_size=12'],
     'train_batch_size 12 is not divisible by the 8 replicas'),
    (['--cost_model=flops'], "unknown cost model 'flops'"),
    (['--rl_reward_function=exp'], "unknown reward function 'exp'"),
    (['--max_steps=abc'], "flag --max_steps=abc"),
    (['--increase_ops_warmup_steps_fraction=0.5'],
     'increase_ops_warmup_steps_fraction=0.5 is larger than '
     'rl_delay_steps_fraction=0.25'),
    (['--save_checkpoints_steps=0'], 'save_checkpoints_steps must be '
     'positive (or unset: every 5 host loops), got 0'),
    (['--rl_learning_rate=nan'],
     'rl_learning_rate must be a finite number, got nan'),
    (['--use_bfloat16=maybe'],
     "flag --use_bfloat16=maybe: 'maybe' is not auto, true or false"),
    (['--multi_worker', '--num_replicas=2'], 'multi_worker needs the '
     'TF_CONFIG environment variable to describe the cluster'),
    (['--num_replicas=3'], 'train_batch_size 4096 is not divisible by the 3 '
     'replicas'),
    # Not taken for "unset" (the default, 1).
    (['--num_replicas=0'], 'num_replicas must be positive, got 0'),
    (['--num_replicas=-1'], 'num_replicas must be positive, got -1'),
    (['--image_size=0'], 'image_size 0 is outside the valid range 28..512'),
    (['--seed=-1'], 'seed must be >= 0, got -1'),
    # TensorFlow's seeds are int64.
    (['--seed=9223372036854775808'],
     'seed must be at most 9223372036854775807, got 9223372036854775808'),
    (['--cost_model_file='], '--cost_model_file is empty'),
    # Checked before the model dir is created: none is left behind.
    (['--resume_from=model.ckpt-3'],
     '--resume_from=model.ckpt-3: model dir {model_dir} does not exist'),
]


def _model_dir_of_a_train_eval_run(model_dir):
  from tests.standalone import test_train_eval  # pylint: disable=g-import-not-at-top
  model_dir.mkdir()
  config = test_train_eval.make_config(model_dir)
  (model_dir / 'config.json').write_text(config.to_json())


def _model_dir_of_another_space(model_dir):
  model_dir.mkdir()
  config = SearchConfig(
      search_space='mobilenet_v3_like_search', model_dir=str(model_dir),
      num_classes=10, num_train_examples=10000, rl_cost_model_target=57.0)
  (model_dir / 'config.json').write_text(config.to_json())


# Refused model dirs besides _BAD_INPUT's, by name: (how the dir is made,
# the command line's flags after --model_dir).
_REFUSED_DIRS = {
    # Not "holds checkpoints but no config.json": it holds neither.
    'empty': (lambda d: d.mkdir(), ['--resume_from=model.ckpt-3']),
    'train_eval': (_model_dir_of_a_train_eval_run,
                   ['--flagfile=configs/smoke_cpu.cfg']),
    # Rejected first (max_steps must be positive): nothing created.
    'rejected': (lambda d: d.mkdir(), ['--flagfile=configs/smoke_cpu.cfg',
                                       '--max_steps=0']),
    'other_space': (_model_dir_of_another_space,
                    ['--flagfile=configs/smoke_cpu.cfg']),
}


@pytest.fixture(scope='module')
def refusals(tmp_path_factory):
  """Every refusal of this file run in one process (tests/bin/one_process.py):
  ((model dir, exit code, stderr) per _BAD_INPUT case, {name: (model dir,
  its files before, exit code, stderr)} per _REFUSED_DIRS case). Two
  _BAD_INPUT cases also run as whole processes
  (test_bad_input_in_a_real_process)."""
  dirs = [str(tmp_path_factory.mktemp('bad') / 'run') for _ in _BAD_INPUT]
  lines = [[f'--model_dir={d}', *argv] for d, (argv, _) in zip(
      dirs, _BAD_INPUT)]
  refused = {}
  for name, (make, argv) in _REFUSED_DIRS.items():
    model_dir = tmp_path_factory.mktemp(name) / 'run'
    make(model_dir)
    refused[name] = (str(model_dir), snapshot(str(model_dir)))
    lines.append([f'--model_dir={model_dir}', *argv])
  results = one_process.run_many('search', lines)
  bad = [(d, code, err) for d, (code, err) in zip(dirs, results)]
  for name, (code, err) in zip(refused, results[len(dirs):]):
    refused[name] += (code, err)
  return bad, refused


def _assert_refused(model_dir, code, stderr, message):
  assert code == 2, stderr
  lines = [l for l in stderr.splitlines() if l.strip()]
  assert len(lines) == 1, stderr
  assert message.format(model_dir=model_dir) in lines[0]
  assert not os.path.exists(model_dir)  # Nothing written.


@pytest.mark.parametrize('case', range(len(_BAD_INPUT)),
                         ids=[m for _, m in _BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(refusals, case):
  model_dir, code, stderr = refusals[0][case]
  _assert_refused(model_dir, code, stderr, _BAD_INPUT[case][1])


# The same as whole processes, through absl's app.run: a config that does
# not validate, a model dir checked in main. A flag that does not parse
# (refused by app.run's flag parser) is run as a whole process in
# tests/bin/test_quiet_errors.py (search --validation_weights=nope).
@pytest.mark.parametrize('case', [11, 23], ids=['config', 'model_dir'])
def test_bad_input_in_a_real_process(tmp_path, case):
  flags, message = _BAD_INPUT[case]
  model_dir = tmp_path / 'run'
  result = _run(f'--model_dir={model_dir}', *flags)
  _assert_refused(str(model_dir), result.returncode, result.stderr, message)


# The model dirs main refuses, in one process (the `refusals` fixture); a
# whole process refuses a model dir in test_bad_input_in_a_real_process.
def test_resume_from_an_empty_dir_names_its_checkpoints(refusals):
  model_dir, _, code, stderr = refusals[1]['empty']
  assert code == 2, stderr
  assert stderr.strip().splitlines() == [
      f'search.py: error: --resume_from=model.ckpt-3 is not a checkpoint of '
      f'{model_dir}; checkpoints: none']
  assert os.listdir(model_dir) == []


def test_model_dir_of_a_train_eval_run_is_refused(refusals):
  model_dir, before, code, stderr = refusals[1]['train_eval']
  assert code == 2, stderr
  assert stderr.strip().splitlines() == [
      f'search.py: error: model dir {model_dir} holds a train_eval run, not '
      'a search; use another --model_dir']
  assert snapshot(model_dir) == before


def test_model_dir_of_another_space_is_refused(refusals):
  rejected, _, first, _ = refusals[1]['rejected']
  assert first == 2
  assert os.listdir(rejected) == []
  other, _, code, stderr = refusals[1]['other_space']
  assert code == 2
  assert stderr.startswith(
      f"search.py: error: model dir {other} holds a search of "
      "'mobilenet_v3_like_search', not 'proxylessnas_search'"), stderr
  assert os.listdir(other) == ['config.json']


# Runs bin/search.py in-process and SIGKILLs itself right after the
# checkpoint of step argv[1] is saved: a kill at a known point, not a race
# between a poll and the search's speed.
_KILL_AFTER_CHECKPOINT = """
import os, signal, sys
sys.path.insert(0, os.getcwd())
from tunas_search.runtime import progress
kill_step = int(sys.argv.pop(1))
saved = progress.CheckpointLogger.after_save
def after_save(self, session, step):
  saved(self, session, step)
  if step == kill_step:
    os.kill(os.getpid(), signal.SIGKILL)
progress.CheckpointLogger.after_save = after_save
sys.argv[0] = 'search.py'
from bin import search
search.run()
"""


@pytest.mark.slow
def test_killed_search_resumes_with_the_same_command(tmp_path):
  flags = ['--flagfile=configs/smoke_cpu.cfg', f'--model_dir={tmp_path}',
           '--image_size=28', '--max_steps=60', '--save_checkpoints_steps=20',
           '--tpu_iterations_per_loop=10']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  killed = subprocess.run(
      [sys.executable, '-c', _KILL_AFTER_CHECKPOINT, '20', *flags], cwd=ROOT,
      env=env, capture_output=True, text=True, timeout=900)
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
  checkpoint = tf.train.load_checkpoint(str(tmp_path))
  assert checkpoint.get_tensor('global_step') == 20
  result = _run(*flags, timeout=900)
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'Search at step 60' in result.stdout
  final = tf.train.load_checkpoint(str(tmp_path))
  assert final.get_tensor('global_step') == 60
  # The baseline continued from the killed run's count, not from zero.
  assert final.get_tensor('rlcontroller/baseline/count') == 60
