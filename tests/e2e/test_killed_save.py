"""A real search killed with SIGKILL while it writes a checkpoint resumes
when the same command is rerun (the tools as subprocesses, as a user runs
them): from the step the kill left, with the values a resume from that
checkpoint computes.

Where the kill lands is not left to a race between a poll and the save's
speed: the search pauses inside its save of step 4, after the shard is
written and before the shards are merged (a graph-building patch of
`MergeV2Checkpoints`, tunas_search/runtime/checkpoints.py, step 2), until the test,
polling for the save's temp dir, kills it. Each kind of unfinished save is
rebuilt deterministically, and resumed in process, in
tests/test_checkpoints.py and tests/e2e/test_reruns_keep_checkpoints.py (the
fast variant of this test).
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
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


def _values(model_dir):
  """The latest checkpoint's step, controller (logits, Adam slots, EMA
  baseline) and classifier values."""
  reader = tf.train.load_checkpoint(model_dir)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if name.startswith(('global_step', 'rlcontroller/', 'classifier/'))}


@pytest.mark.slow  # Four searches as subprocesses: a minute or more.
def test_search_killed_while_saving_resumes_with_the_same_command(tmp_path):
  # The uninterrupted search, then the same rerun from checkpoint 2 on
  # request: what a resume from 2 computes (a resumed run reads its input
  # from the start again, so it differs from the uninterrupted run, which is
  # also what a restart from step 0 would compute).
  reference = str(tmp_path / 'reference')
  ok(run_tool('search', f'--model_dir={reference}', *FLAGS))
  uninterrupted = _values(reference)
  ok(run_tool('search', f'--model_dir={reference}',
              '--resume_from=model.ckpt-2', *FLAGS))
  on_request = _values(reference)
  model_dir = str(tmp_path / 'search')
  _kill_while_saving(model_dir, 4)
  assert os.path.isdir(os.path.join(model_dir, 'model.ckpt-4_temp'))
  assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-2')
  done = run_tool('search', f'--model_dir={model_dir}', *FLAGS)
  assert 'Search at step 6' in ok(done)
  assert f'search of {TUTORIAL_SPACE} in {model_dir}: step 2 of 6' in (
      done.stderr), done.stderr[-3000:]
  assert 'saves that did not finish' in done.stderr
  assert 'Traceback' not in done.stderr
  assert not os.path.exists(os.path.join(model_dir, 'model.ckpt-4_temp'))
  resumed = _values(model_dir)
  assert resumed['global_step'] == 6
  assert resumed['rlcontroller/baseline/count'] == 6
  for name, value in on_request.items():
    np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6,
                               err_msg=name)
  assert max(np.max(np.abs(uninterrupted[name] - on_request[name]))
             for name in on_request) > 1e-4
