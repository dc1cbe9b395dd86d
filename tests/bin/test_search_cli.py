"""bin/search.py: bad input gives one line and exit 2 before anything is
written; a killed search resumes when the same command is rerun (slow)."""

import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
SEARCH = os.path.join(ROOT, 'bin', 'search.py')


def _run(*flags, timeout=120):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run([sys.executable, SEARCH, *flags], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize('flags, message', [
    (['--search_space=nasnet'],
     "unknown search space 'nasnet'; valid choices: mnasnet_b1"),
    (['--ssd=nasnet'], "unknown search space 'nasnet'"),  # TuNAS's alias.
    (['--search_space=mobilenet_v2'],
     "'mobilenet_v2' is a reference architecture, not a search space"),
    (['--dataset=mnist'], "unknown dataset 'mnist'"),
    (['--dataset=imagenet'], "dataset 'imagenet' (TFDS imagenet2012) needs a "
     'data_dir'),
    (['--dataset=cifar10', '--data_dir=/nonexistent/tfds'],
     'data_dir /nonexistent/tfds does not exist'),
    (['--image_size=16'], 'image_size 16 is outside the valid range 28..224'),
    (['--use_tpu', '--tpu=x', '--num_replicas=8', '--train_batch_size=12'],
     'train_batch_size 12 is not divisible by the 8 replicas'),
    (['--cost_model=flops'], "unknown cost model 'flops'"),
    (['--rl_reward_function=exp'], "unknown reward function 'exp'"),
    (['--max_steps=abc'], "flag --max_steps=abc"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags, message):
  model_dir = tmp_path / 'run'
  result = _run(f'--model_dir={model_dir}', *flags)
  assert result.returncode == 2, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert message in lines[0]
  assert not model_dir.exists()  # Nothing written.


def test_model_dir_of_another_space_is_refused(tmp_path):
  first = _run(f'--model_dir={tmp_path}', '--flagfile=configs/smoke_cpu.cfg',
               '--max_steps=0')  # Rejected (max_steps must be positive).
  assert first.returncode == 2
  from tunas_search.config import SearchConfig  # pylint: disable=g-import-not-at-top
  config = SearchConfig(
      search_space='mobilenet_v3_like_search', model_dir=str(tmp_path),
      num_classes=10, num_train_examples=10000, rl_cost_model_target=57.0)
  (tmp_path / 'config.json').write_text(config.to_json())
  result = _run(f'--model_dir={tmp_path}', '--flagfile=configs/smoke_cpu.cfg')
  assert result.returncode == 2
  assert ("holds a search of 'mobilenet_v3_like_search', not "
          "'proxylessnas_search'") in result.stderr
  assert sorted(os.listdir(tmp_path)) == ['config.json']


@pytest.mark.slow
def test_killed_search_resumes_with_the_same_command(tmp_path):
  flags = ['--flagfile=configs/smoke_cpu.cfg', f'--model_dir={tmp_path}',
           '--image_size=28', '--max_steps=60', '--save_checkpoints_steps=20',
           '--tpu_iterations_per_loop=10']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  proc = subprocess.Popen([sys.executable, SEARCH, *flags], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  def saved_step():
    checkpoint = tf.train.latest_checkpoint(str(tmp_path))
    return int(checkpoint.rsplit('-', 1)[1]) if checkpoint else -1

  # The Estimator saves step 0 at once; wait for a checkpoint of real work.
  deadline = time.time() + 600
  while time.time() < deadline and saved_step() < 20:
    time.sleep(0.5)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  checkpoint = tf.train.latest_checkpoint(str(tmp_path))
  assert checkpoint, 'no checkpoint before the kill'
  killed = tf.train.load_checkpoint(checkpoint)
  step = killed.get_tensor('global_step')
  assert 0 < step < 60
  result = _run(*flags, timeout=900)
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'Search at step 60' in result.stdout
  final = tf.train.load_checkpoint(str(tmp_path))
  assert final.get_tensor('global_step') == 60
  # The baseline continued from the killed run's count, not from zero.
  assert final.get_tensor('rlcontroller/baseline/count') == 60
