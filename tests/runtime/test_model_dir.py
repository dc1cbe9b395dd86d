"""Tests of the model-dir lock, damage checks, resume_from and temp clean-up.

Faults are injected deterministically: files are truncated, deleted or
overwritten, and a lock holder is a subprocess killed with SIGKILL.
"""

import glob
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.runtime import checkpoints
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.runtime.model_dir import ModelDirError

tf1 = tf.compat.v1
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _write_checkpoints(directory, steps=(1, 2, 3), nan_at=None):
  """Checkpoints of a two-variable graph, as the estimator's saver writes."""
  with tf.Graph().as_default():
    w = tf1.get_variable('w', initializer=tf.zeros([64, 64]))
    step = tf1.train.get_or_create_global_step()
    saver = tf1.train.Saver(save_relative_paths=True, max_to_keep=10)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for s in steps:
        value = np.full([64, 64], float(s), np.float32)
        if s == nan_at:
          value[0, 0] = np.nan
        sess.run([w.assign(value), step.assign(s)])
        saver.save(sess, os.path.join(directory, 'model.ckpt'), global_step=s)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    f.write('{}')


def _prefix(directory, step):
  return os.path.join(directory, f'model.ckpt-{step}')


def test_second_holder_is_refused_with_pid_and_host(tmp_path):
  directory = str(tmp_path / 'run')
  with model_dir_lib.exclusive(directory) as lock:
    lock.acquire()
    with pytest.raises(ModelDirError, match='in use by another process'):
      with model_dir_lib.exclusive(directory):
        pass
    assert not os.listdir(directory)  # Refusing writes nothing.
    lock.record_holder()
    with pytest.raises(ModelDirError) as error:
      with model_dir_lib.exclusive(directory):
        pass
    message = str(error.value)
    assert f'pid {os.getpid()} on host ' in message
    assert '\n' not in message and 'use another --model_dir' in message
  with model_dir_lib.exclusive(directory):  # Released at exit.
    pass


def test_lock_of_a_killed_process_is_released(tmp_path):
  directory = str(tmp_path / 'run')
  holder = subprocess.Popen(
      [sys.executable, '-c',
       'import sys; sys.path.insert(0, sys.argv[1]);'
       'from tunas_search.runtime import model_dir as m\n'
       'with m.exclusive(sys.argv[2]) as lock:\n'
       '  lock.record_holder(); print("locked", flush=True)\n'
       '  sys.stdin.read()',
       _ROOT, directory],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'locked'
    with pytest.raises(ModelDirError, match=f'pid {holder.pid} on host'):
      with model_dir_lib.exclusive(directory):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  with model_dir_lib.exclusive(directory):
    pass


def test_model_dir_under_a_file_is_one_line(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('x')
  with pytest.raises(ModelDirError, match=r'cannot use model dir .*file/run'):
    with model_dir_lib.exclusive(str(blocker / 'run')) as lock:
      lock.acquire()
  assert blocker.read_text() == 'x'


def test_a_new_dir_is_created_only_when_the_run_goes_ahead(tmp_path):
  directory = tmp_path / 'new' / 'run'
  # A run refused by its checks (here: an exception in the block).
  with pytest.raises(ModelDirError, match='refused'):
    with model_dir_lib.exclusive(str(directory)):
      model_dir_lib.check(str(directory))
      raise ModelDirError('refused')
  assert os.listdir(tmp_path) == []
  with model_dir_lib.exclusive(str(directory)) as lock:
    assert os.listdir(tmp_path) == []
    lock.acquire()
    lock.acquire()  # Once is enough; again does nothing.
    assert os.listdir(directory) == []
    with pytest.raises(ModelDirError, match='in use by another process'):
      with model_dir_lib.exclusive(str(directory)):
        pass
  with model_dir_lib.exclusive(str(directory)):  # Released at exit.
    pass


def test_a_new_dir_written_by_another_run_meanwhile_is_refused(tmp_path):
  directory = tmp_path / 'run'
  with model_dir_lib.exclusive(str(directory)) as lock:
    # The other run created and wrote the dir after this run's checks.
    directory.mkdir()
    (directory / 'config.json').write_text('{}')
    with pytest.raises(ModelDirError, match='was written by another run '
                       'while this one started; rerun to resume it'):
      lock.acquire()
  assert os.listdir(directory) == ['config.json']


def test_resume_from_needs_the_dir_and_one_of_its_checkpoints(tmp_path):
  missing = str(tmp_path / 'missing')
  with pytest.raises(ModelDirError, match=(
      f'^--resume_from=model.ckpt-2: model dir {missing} does not exist$')):
    model_dir_lib.check(missing, resume_from='model.ckpt-2')
  # An empty dir holds no checkpoint (not "checkpoints but no config.json").
  with pytest.raises(ModelDirError, match=(
      f'^--resume_from=model.ckpt-2 is not a checkpoint of {tmp_path}; '
      'checkpoints: none$')):
    model_dir_lib.check(str(tmp_path), resume_from='model.ckpt-2')
  _write_checkpoints(str(tmp_path))
  model_dir_lib.check(str(tmp_path), resume_from='model.ckpt-2')
  os.remove(tmp_path / 'config.json')
  with pytest.raises(ModelDirError, match='holds checkpoints but no '
                     'config.json'):
    model_dir_lib.check(str(tmp_path), resume_from='model.ckpt-2')
  assert not os.path.exists(missing)


def test_find_checkpoint_takes_every_spelling_and_names_the_flag(
    tmp_path, monkeypatch):
  directory = tmp_path / 'run'
  directory.mkdir()
  _write_checkpoints(str(directory))
  expected = _prefix(str(directory), 2)
  monkeypatch.chdir(tmp_path)
  for spelling in ('model.ckpt-2', 'run/model.ckpt-2', expected,
                   './run/../run/model.ckpt-2'):
    assert model_dir_lib.find_checkpoint('run', spelling) == os.path.join(
        'run', 'model.ckpt-2'), spelling
    assert model_dir_lib.find_checkpoint(str(directory), spelling) == (
        expected), spelling
  with pytest.raises(ModelDirError, match=(
      r'^--checkpoint=run/config.json is not a checkpoint of run; '
      r'checkpoints: model.ckpt-1, model.ckpt-2, model.ckpt-3$')):
    model_dir_lib.find_checkpoint('run', 'run/config.json',
                                  flag='checkpoint')


def test_intact_dir_and_new_dir_pass(tmp_path):
  model_dir_lib.check(str(tmp_path / 'missing'))
  model_dir_lib.check(str(tmp_path))  # Empty.
  _write_checkpoints(str(tmp_path))
  model_dir_lib.check(str(tmp_path))
  assert model_dir_lib.checkpoint_prefixes(str(tmp_path)) == [
      _prefix(str(tmp_path), s) for s in (1, 2, 3)]


@pytest.mark.parametrize('fault', ['truncated', 'deleted'])
def test_damaged_latest_checkpoint_is_refused(tmp_path, fault):
  directory = str(tmp_path)
  _write_checkpoints(directory)
  data = _prefix(directory, 3) + '.data-00000-of-00001'
  if fault == 'truncated':
    with open(data, 'r+b') as f:
      f.truncate(100)
  else:
    os.remove(data)
  with pytest.raises(ModelDirError) as error:
    model_dir_lib.check(directory)
  message = str(error.value)
  assert f'checkpoint {_prefix(directory, 3)} cannot be read' in message
  assert f'--resume_from={_prefix(directory, 2)}' in message
  assert '\n' not in message


def test_garbage_state_file_is_refused(tmp_path):
  directory = str(tmp_path)
  _write_checkpoints(directory)
  with open(os.path.join(directory, 'checkpoint'), 'w') as f:
    f.write('this is not a checkpoint state\x00')
  with pytest.raises(ModelDirError, match='is not a checkpoint state file.*'
                     f'--resume_from={_prefix(directory, 3)}'):
    model_dir_lib.check(directory)


def test_missing_state_file_and_missing_config_are_refused(tmp_path):
  directory = str(tmp_path)
  _write_checkpoints(directory)
  os.remove(os.path.join(directory, 'checkpoint'))
  with pytest.raises(ModelDirError, match='checkpoint state file .* is '
                     'missing'):
    model_dir_lib.check(directory)
  os.remove(os.path.join(directory, 'config.json'))
  with pytest.raises(ModelDirError, match='holds checkpoints but no '
                     'config.json'):
    model_dir_lib.check(directory)


def test_resume_from_makes_an_older_checkpoint_the_latest(tmp_path):
  directory = str(tmp_path)
  _write_checkpoints(directory)
  with open(_prefix(directory, 3) + '.data-00000-of-00001', 'r+b') as f:
    f.truncate(10)
  assert model_dir_lib.resume_from(directory, 'model.ckpt-2') == _prefix(
      directory, 2)
  model_dir_lib.check(directory)
  assert tf.train.latest_checkpoint(directory) == _prefix(directory, 2)
  # Unrecorded now, the damaged checkpoint 3 is still a (damaged)
  # checkpoint, never an unfinished save: nothing removes it.
  with pytest.raises(ModelDirError, match='not a checkpoint of .*'
                     'checkpoints: model.ckpt-1, model.ckpt-2, '
                     'model.ckpt-3$'):
    model_dir_lib.resume_from(directory, 'model.ckpt-7')
  with pytest.raises(ModelDirError, match='model.ckpt-3 cannot be read'):
    model_dir_lib.resume_from(directory, 'model.ckpt-3')
  assert model_dir_lib.unfinished_saves(directory) == []
  assert len(glob.glob(_prefix(directory, 3) + '.*')) == 3


def test_damage_can_require_finite_values(tmp_path):
  directory = str(tmp_path)
  _write_checkpoints(directory, nan_at=3)
  assert model_dir_lib.damage(_prefix(directory, 3)) is None
  assert 'NaN or inf' in model_dir_lib.damage(_prefix(directory, 3),
                                              require_finite=True)
  assert model_dir_lib.newest_intact(directory, require_finite=True) == (
      _prefix(directory, 2))


def test_stale_temp_dirs_are_removed(tmp_path):
  stale = tmp_path / 'model.ckpt-5_temp' / 'part-00000-of-00001.index'
  stale.parent.mkdir()
  stale.write_text('x')
  keep = tmp_path / 'eval'
  keep.mkdir()
  with model_dir_lib.exclusive(str(tmp_path)) as lock:
    removed = model_dir_lib.remove_unfinished_saves(lock)
  assert removed == [str(tmp_path / 'model.ckpt-5_temp')]
  assert sorted(os.listdir(tmp_path)) == ['eval']


def test_checkpoint_names_are_joined_for_local_and_remote_dirs():
  join = checkpoints.join
  assert join('/tmp/run/', 'model.ckpt-4') == '/tmp/run/model.ckpt-4'
  assert join('runs/a', 'model.ckpt-4') == 'runs/a/model.ckpt-4'
  assert join('/tmp/run', '/tmp/run/model.ckpt-4') == '/tmp/run/model.ckpt-4'
  # The checkpoint state names checkpoints relative to a gs:// dir too.
  assert join('gs://b/run/', 'model.ckpt-4') == 'gs://b/run/model.ckpt-4'
  assert join('gs://b/run', 'gs://b/run/model.ckpt-4') == (
      'gs://b/run/model.ckpt-4')


def test_missing_variable_error_names_the_variable_or_is_none():
  error = tf.errors.NotFoundError(
      None, None, 'Restoring from checkpoint failed. ...\n\nKey a/b/kernel '
      'not found in checkpoint\n\t [[node save/RestoreV2]]')
  found = model_dir_lib.missing_variable_error(error, '/run/model.ckpt-7',
                                               advice='do this')
  assert isinstance(found, ModelDirError)
  assert str(found) == (
      'checkpoint /run/model.ckpt-7 has no variable a/b/kernel, which this '
      'graph has: it was written by another tunas_search version or graph; '
      'do this')
  other = tf.errors.NotFoundError(None, None, '/data/x.tfrecord not found')
  assert model_dir_lib.missing_variable_error(other, '/run/x') is None


# What TensorFlow raises when a disk is full (messages as TF 2.15 gives them
# on a full tmpfs): the Saver's session run, the events writer's thread, the
# in-graph summary writer, and Python's own writes.
_SAVE = ('Graph execution error:\n\nDetected at node \'save/SaveV2\'\n'
         '/run/model.ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.'
         'tempstate1; No space left on device\n\t [[{{node save/SaveV2}}]]')
_EVENTS = ('/run/events.out.tfevents.1.vm; No space left on device\n\tFailed '
           'to flush 3 events to /run/events.out.tfevents.1.vm')


@pytest.mark.parametrize('error, path', [
    (tf.errors.ResourceExhaustedError(None, None, _SAVE),
     '/run/model.ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.'
     'tempstate1'),
    (RuntimeError(_EVENTS), '/run/events.out.tfevents.1.vm'),
    (tf.errors.ResourceExhaustedError(None, None, _EVENTS),
     '/run/events.out.tfevents.1.vm'),
    (OSError(28, 'No space left on device', '/run/search_result.json'),
     '/run/search_result.json'),
    (OSError(28, 'No space left on device'), ''),
    (tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating'),
     None),
    (OSError(13, 'Permission denied', '/run/x'), None),
])
def test_no_space_path_names_what_a_full_disk_stopped(error, path):
  assert model_dir_lib.no_space_path(error) == path


def test_a_full_disk_is_one_line_naming_the_path_and_the_resume_point(
    tmp_path):
  directory = str(tmp_path)
  with pytest.raises(model_dir_lib.DiskFullError) as raised:
    with model_dir_lib.stopping_on_full_disk(directory):
      raise RuntimeError(_EVENTS)
  assert str(raised.value) == (
      'no space left on device writing /run/events.out.tfevents.1.vm; the '
      'run stopped and no checkpoint was written yet: free disk space and '
      'rerun the same command to resume')
  _write_checkpoints(directory)
  with pytest.raises(model_dir_lib.DiskFullError, match=(
      f'^no space left on device writing {directory}; the run stopped and '
      f'checkpoints up to {_prefix(directory, 3)} are intact: ')):
    with model_dir_lib.stopping_on_full_disk(directory):
      raise OSError(28, 'No space left on device')
  with pytest.raises(ValueError, match='other'):  # Anything else passes.
    with model_dir_lib.stopping_on_full_disk(directory):
      raise ValueError('other')


def test_write_text_leaves_the_earlier_file_when_it_fails(tmp_path,
                                                          monkeypatch):
  path = str(tmp_path / 'result.json')
  model_dir_lib.write_text(path, 'earlier')

  def failing_rename(*args, **kwargs):
    del args, kwargs
    raise OSError(28, 'No space left on device', path)
  monkeypatch.setattr(tf.io.gfile, 'rename', failing_rename)
  with pytest.raises(OSError):
    model_dir_lib.write_text(path, 'later')
  assert os.listdir(tmp_path) == ['result.json']
  assert (tmp_path / 'result.json').read_text() == 'earlier'
