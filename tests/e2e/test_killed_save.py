"""A real search killed with SIGKILL while it writes a checkpoint resumes
when the same command is rerun (the tools as subprocesses, as a user runs
them).

Where the kill lands is not left to a race between a poll and the save's
speed: the search pauses inside its save of step 4, after the shard is
written and before the shards are merged (a graph-building patch of
`MergeV2Checkpoints`, tunas_search/runtime/checkpoints.py, step 2), until the test,
polling for the save's temp dir, kills it. Each kind of unfinished save is
rebuilt deterministically in tests/runtime/test_checkpoints.py and
tests/e2e/test_model_dir_e2e.py.
"""

import os
import signal
import subprocess
import sys
import time

import tensorflow as tf

from tests.bin.test_quiet_errors import HANG_GUARD_S
from tests.bin.test_quiet_errors import ROOT
from tests.bin.test_quiet_errors import user_env
from tests.e2e.test_user_spaces import TUTORIAL_SPACE
from tests.e2e.test_user_spaces import ok
from tests.e2e.test_user_spaces import run_tool

# bin/search.py, paused before it merges the save of step argv[1].
_PAUSE_BEFORE_MERGE = """
import os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_io_ops
suffix = '-' + sys.argv.pop(1)
merge = gen_io_ops.merge_v2_checkpoints
def pause(prefix):
  if prefix.decode().endswith(suffix):
    time.sleep(3600)  # Until killed.
  return np.int32(0)
def paused_merge(checkpoint_prefixes, destination_prefix, **kwargs):
  paused = tf.numpy_function(pause, [destination_prefix], tf.int32)
  with tf.control_dependencies([paused]):
    return merge(checkpoint_prefixes, destination_prefix, **kwargs)
gen_io_ops.merge_v2_checkpoints = paused_merge
sys.argv[0] = 'search.py'
from bin import search
search.run()
"""

FLAGS = (f'--search_space={TUTORIAL_SPACE}', '--train_batch_size=8',
         '--max_steps=6', '--save_checkpoints_steps=2',
         '--tpu_iterations_per_loop=2', '--rl_cost_model_target=5e5',
         '--image_size=28', '--seed=1')


def _kill_while_saving(model_dir: str, step: int) -> None:
  """Runs the search until its save of `step` has begun, then SIGKILLs it."""
  search = subprocess.Popen(
      [sys.executable, '-c', _PAUSE_BEFORE_MERGE, str(step),
       f'--model_dir={model_dir}', *FLAGS], cwd=ROOT, env=user_env(),
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  temp = os.path.join(model_dir, f'model.ckpt-{step}_temp')
  deadline = time.monotonic() + HANG_GUARD_S  # Only against a hang.
  while (search.poll() is None and not os.path.isdir(temp) and
         time.monotonic() < deadline):
    time.sleep(0.05)
  search.kill()
  _, stderr = search.communicate()
  assert search.returncode == -signal.SIGKILL, stderr[-3000:]


def test_search_killed_while_saving_resumes_with_the_same_command(tmp_path):
  model_dir = str(tmp_path / 'search')
  _kill_while_saving(model_dir, 4)
  assert os.path.isdir(os.path.join(model_dir, 'model.ckpt-4_temp'))
  assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-2')
  done = run_tool('search', f'--model_dir={model_dir}', *FLAGS)
  assert 'Search at step 6' in ok(done)
  assert 'saves that did not finish' in done.stderr
  assert 'Traceback' not in done.stderr
  final = tf.train.load_checkpoint(model_dir)
  assert final.get_tensor('global_step') == 6
  # The controller's baseline continued from checkpoint 2, not from zero.
  assert final.get_tensor('rlcontroller/baseline/count') == 6
  assert not os.path.exists(os.path.join(model_dir, 'model.ckpt-4_temp'))
