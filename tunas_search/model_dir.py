"""The model directory: one run at a time, intact checkpoints, bounded disk use.

A model dir holds a run's `config.json`, `model_spec.json`, checkpoints and
summaries. Nothing a user ran may be lost or silently replaced, so:
  * `exclusive` holds an OS lock on the dir for a run's lifetime; a second run
    is refused (the OS drops the lock of a killed process, so `kill -9` never
    leaves a stale lock); a new dir is created only once the run's checks
    have passed, so a refused run leaves no empty dir behind;
  * `check` refuses a dir whose checkpoints are damaged (a garbage checkpoint
    state file, a truncated or missing data file, checkpoints without
    `config.json`) instead of letting TensorFlow restart from step 0 over the
    good checkpoints, and names the newest intact checkpoint;
  * `resume_from` makes an intact checkpoint the one the next run restores;
  * `remove_stale_temp_dirs` deletes what a killed checkpoint write left.
"""

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import socket
from typing import Iterator, List, Optional

from absl import logging
from google.protobuf import text_format
import numpy as np
import tensorflow as tf

from tunas_search import config as config_lib

tf1 = tf.compat.v1

# Who holds the lock (written by the holder once its run goes ahead).
LOCK_FILENAME = '.tunas_search.lock'
STATE_FILENAME = 'checkpoint'  # The name tf.train.Saver gives it.
_CHECKPOINT_INDEX = re.compile(r'^(.*\.ckpt-(\d+))\.index$')
# tf.train.Saver writes sharded checkpoints into `<prefix>_temp...` first.
_TEMP_DIR = re.compile(r'.*\.ckpt-\d+_temp.*')


class ModelDirError(config_lib.ConfigError):
  """The model dir cannot be used as it is; the message is one line.

  A ConfigError, so every CLI reports it as bad input (one line, exit 2).
  """


def _is_local(path: str) -> bool:
  return '://' not in path


class Lock:
  """A model-dir lock, held from `acquire` until `exclusive` ends.

  The lock is an OS lock (flock) on the directory itself, so taking it
  writes nothing and the OS drops it when the holder dies.
  """

  def __init__(self, model_dir: str, new: bool):
    self._model_dir = model_dir
    self._path = os.path.join(model_dir, LOCK_FILENAME)
    # The dir did not exist when the run's checks began.
    self._new = new
    self._fd: Optional[int] = None

  def acquire(self) -> None:
    """Creates the dir if needed and takes the lock; later calls do nothing.

    A run calls it once its checks have passed, before it writes anything,
    so that a refused run never creates its model dir.

    Raises:
      ModelDirError: if the dir cannot be created, another process holds
        it (naming its pid and host when it has recorded them), or another
        run wrote into a dir that did not exist when this run's checks ran.
    """
    if self._fd is not None or not _is_local(self._model_dir):
      return
    try:
      os.makedirs(self._model_dir, exist_ok=True)
      fd = os.open(self._model_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
      raise ModelDirError(f'cannot use model dir {self._model_dir}: '
                          f'{e.strerror or e}') from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise ModelDirError(
          f'model dir {self._model_dir} is in use by '
          f'{_holder(self._model_dir)}; wait for that run to end or use '
          'another --model_dir') from None
    if self._new and os.listdir(self._model_dir):
      # The checks saw no dir: what the other run wrote went unchecked.
      os.close(fd)
      raise ModelDirError(
          f'model dir {self._model_dir} was written by another run while '
          'this one started; rerun to resume it, or use another --model_dir')
    self._fd = fd

  def release(self) -> None:
    """Drops the lock, if held."""
    if self._fd is not None:
      os.close(self._fd)  # Also releases the lock.
      self._fd = None

  def record_holder(self) -> None:
    """Takes the lock if needed; writes this process's pid and host.

    Called once the run's checks have passed, so that a refused run leaves
    the dir untouched; runs refused later name the holder.
    """
    self.acquire()
    if not _is_local(self._path):
      return
    holder = {'pid': os.getpid(), 'host': socket.gethostname(),
              'since': datetime.datetime.now().isoformat(timespec='seconds')}
    with open(self._path + '.tmp', 'w') as f:
      json.dump(holder, f)
    os.replace(self._path + '.tmp', self._path)


@contextlib.contextmanager
def exclusive(model_dir: str) -> Iterator[Lock]:
  """Holds an exclusive lock on `model_dir` while the block runs.

  An existing dir is locked at once, so that the run's checks read what no
  other run changes. A dir that does not exist yet is created and locked
  only by `Lock.acquire` (or `record_holder`): a run refused by its checks
  leaves nothing behind. Remote dirs (gs://...) cannot be locked this way;
  they are used unlocked, with a warning.

  Yields:
    The lock; call `acquire()` before the run's first write and
    `record_holder()` once the run is known to go ahead.

  Raises:
    ModelDirError: if another process holds the lock of an existing dir
      (naming its pid and host when it has recorded them), or the dir
      cannot be opened.
  """
  if not _is_local(model_dir):
    logging.warning('%s is not a local directory: it cannot be locked, so make '
                    'sure no other run uses it', model_dir)
    yield Lock(model_dir, new=False)
    return
  new = not os.path.isdir(model_dir)
  lock = Lock(model_dir, new)
  try:
    if not new:
      lock.acquire()
    yield lock
  finally:
    lock.release()


def _holder(model_dir: str) -> str:
  """`pid N on host H (since T)` as the holder recorded it, if it did."""
  try:
    with open(os.path.join(model_dir, LOCK_FILENAME)) as f:
      holder = json.load(f)
    return (f'pid {holder["pid"]} on host {holder["host"]} (since '
            f'{holder["since"]})')
  except (ValueError, KeyError, TypeError, OSError):
    return 'another process'


def checkpoint_prefixes(model_dir: str) -> List[str]:
  """Every checkpoint in `model_dir` with an index file, oldest first.

  None in a dir that does not exist (yet: `exclusive` creates it late).
  """
  if not tf.io.gfile.isdir(model_dir):
    return []
  found = []
  for name in tf.io.gfile.listdir(model_dir):
    match = _CHECKPOINT_INDEX.match(name.rstrip('/'))
    if match:
      found.append((int(match.group(2)), _join(model_dir, match.group(1))))
  return [prefix for _, prefix in sorted(found)]


def damage(prefix: str, require_finite: bool = False) -> Optional[str]:
  """Why the checkpoint `prefix` cannot be restored, or None if it can.

  Reads every variable, so a truncated or missing data file is found.

  Args:
    prefix: e.g. `<model_dir>/model.ckpt-400`.
    require_finite: also call a checkpoint with NaN or inf in a floating-point
      variable damaged.
  """
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name, dtype in reader.get_variable_to_dtype_map().items():
      value = reader.get_tensor(name)
      if require_finite and dtype.is_floating and not np.all(
          np.isfinite(np.asarray(value, np.float32))):
        return f'variable {name} holds NaN or inf'
  # The reader raises IndexError for a truncated data file, OpErrors for
  # missing or corrupt files.
  except (tf.errors.OpError, ValueError, IndexError) as e:
    reason = (str(getattr(e, 'message', e)).splitlines() or ['unreadable'])[0]
    return reason[:200]
  return None


def newest_intact(model_dir: str, require_finite: bool = False,
                  before: Optional[str] = None) -> Optional[str]:
  """The newest restorable checkpoint (older than `before` if given)."""
  prefixes = checkpoint_prefixes(model_dir)
  if before is not None and before in prefixes:
    prefixes = prefixes[:prefixes.index(before)]
  for prefix in reversed(prefixes):
    if damage(prefix, require_finite) is None:
      return prefix
  return None


def _empty_state():
  """An empty CheckpointState proto (its class has no public name)."""
  state = tf1.train.generate_checkpoint_state_proto('.', 'x')
  state.Clear()
  return state


def _read_state(model_dir: str):
  """The parsed checkpoint state file, None if absent.

  Raises:
    ModelDirError: if the file is not a checkpoint state.
  """
  path = os.path.join(model_dir, STATE_FILENAME)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      state = text_format.Parse(f.read(), _empty_state())
  except (text_format.ParseError, UnicodeDecodeError) as e:
    raise _damaged(model_dir, f'{path} is not a checkpoint state file '
                   f'({str(e).splitlines()[0][:80]})') from None
  if not state.model_checkpoint_path:
    raise _damaged(model_dir, f'{path} names no checkpoint')
  return state


def _join(model_dir: str, path: str) -> str:
  """`path` (absolute, or relative to `model_dir`) as `checkpoint_prefixes`
  names it, so the two compare equal."""
  if not _is_local(path):
    return path  # Already a full gs://... path.
  if not _is_local(model_dir):
    return f'{model_dir.rstrip("/")}/{path}'
  return os.path.normpath(path if os.path.isabs(path) else
                          os.path.join(model_dir, path))


def _damaged(model_dir: str, what: str,
             before: Optional[str] = None) -> ModelDirError:
  good = newest_intact(model_dir, before=before)
  if good is None:
    advice = 'no intact checkpoint is left; use a new --model_dir'
  else:
    advice = (f'the newest intact checkpoint is {good}; rerun with '
              f'--resume_from={good} to continue from it, or use a new '
              '--model_dir')
  return ModelDirError(f'model dir {model_dir} is damaged: {what}; {advice}')


def _check_config_file(model_dir: str) -> None:
  """Refuses checkpoints without the config.json that says what they are."""
  if not tf.io.gfile.exists(os.path.join(model_dir,
                                         config_lib.CONFIG_FILENAME)):
    raise ModelDirError(
        f'model dir {model_dir} holds checkpoints but no '
        f'{config_lib.CONFIG_FILENAME}; it was not written by tunas_search '
        'or the file was deleted; use another --model_dir')


def check(model_dir: str, resume_from: Optional[str] = None) -> None:
  """Refuses a model dir a run could not resume correctly.

  A dir that does not exist, or holds no checkpoint and no state file, is
  fine (a new run), unless the run is to resume from one of its
  checkpoints. Reads, never writes.

  Args:
    model_dir: the model dir.
    resume_from: the checkpoint the run will continue from (`resume_from`),
      which must be intact; the state file and the latest checkpoint are
      then not looked at, since the state file will be rewritten.

  Raises:
    ModelDirError: naming the damaged file and the newest intact checkpoint:
      checkpoints without `config.json`, a garbage or dangling checkpoint
      state file, or a latest checkpoint that cannot be read completely; or
      a `resume_from` that is no intact checkpoint of the dir (listing its
      checkpoints), or a missing dir to resume.
  """
  if resume_from:
    find_checkpoint(model_dir, resume_from)
    _check_config_file(model_dir)
    return
  if not tf.io.gfile.isdir(model_dir):
    return
  prefixes = checkpoint_prefixes(model_dir)
  state = _read_state(model_dir)
  if state is None and not prefixes:
    return
  _check_config_file(model_dir)
  if state is None:
    raise _damaged(model_dir, f'the checkpoint state file '
                   f'{os.path.join(model_dir, STATE_FILENAME)} is missing')
  latest = _join(model_dir, state.model_checkpoint_path)
  reason = damage(latest)
  if reason is not None:
    raise _damaged(model_dir, f'checkpoint {latest} cannot be read '
                   f'({reason})', before=latest)


# What TensorFlow's Saver says when a graph variable is not in the checkpoint.
_MISSING_KEY = re.compile(r'Key (\S+) not found in checkpoint')


def missing_variable_error(
    error: Exception, checkpoint: str,
    advice: str = ('resume it with that version, or start again with a new '
                   '--model_dir')) -> Optional[ModelDirError]:
  """One line for a checkpoint that lacks a variable of the run's graph.

  `check` finds damaged files before a graph is built; a checkpoint that is
  whole but written by a graph with other variables (another tunas_search
  version, an edited one) only shows when the session restores it, as a
  NotFoundError of a page.

  Args:
    error: what restoring raised.
    checkpoint: the checkpoint being restored.
    advice: what to do, the end of the message.

  Returns:
    The error naming the checkpoint and the missing variable, or None when
    `error` is about something else.
  """
  missing = _MISSING_KEY.search(str(error))
  if missing is None:
    return None
  return ModelDirError(
      f'checkpoint {checkpoint} has no variable {missing.group(1)}, which '
      'this graph has: it was written by another tunas_search version or '
      f'graph; {advice}')


@contextlib.contextmanager
def naming_missing_variables(model_dir: str) -> Iterator[None]:
  """Raises `missing_variable_error` for the latest checkpoint of `model_dir`
  when restoring it inside the block fails on a variable it lacks."""
  try:
    yield
  except tf.errors.NotFoundError as e:
    missing = missing_variable_error(e, tf.train.latest_checkpoint(model_dir))
    if missing is None:
      raise
    raise missing from None


def find_checkpoint(model_dir: str, checkpoint: str,
                    flag: str = 'resume_from') -> str:
  """The prefix of `checkpoint` if it is an intact checkpoint of the dir.

  Args:
    model_dir: the model dir.
    checkpoint: a checkpoint prefix in `model_dir`: absolute, relative to the
      working dir, or relative to `model_dir`.
    flag: the flag that named it, for the message.

  Returns:
    The checkpoint's prefix as `checkpoint_prefixes` names it.

  Raises:
    ModelDirError: if it is not one, listing the dir's checkpoints, or the
      dir does not exist.
  """
  if not tf.io.gfile.isdir(model_dir):
    raise ModelDirError(f'--{flag}={checkpoint}: model dir {model_dir} does '
                        'not exist')
  prefixes = checkpoint_prefixes(model_dir)
  # As printed by this module (relative to the working dir) or relative to
  # the model dir; compared as absolute paths, so that either spelling of a
  # local path matches.
  candidates = [_join(model_dir, checkpoint)]
  if _is_local(checkpoint):
    candidates.insert(0, os.path.normpath(checkpoint))
  key = os.path.abspath if _is_local(model_dir) else (lambda path: path)
  by_key = {key(p): p for p in prefixes}
  prefix = next((by_key[key(c)] for c in candidates if key(c) in by_key),
                None)
  if prefix is None:
    names = ', '.join(os.path.basename(p) for p in prefixes) or 'none'
    raise ModelDirError(f'--{flag}={checkpoint} is not a checkpoint of '
                        f'{model_dir}; checkpoints: {names}')
  reason = damage(prefix)
  if reason is not None:
    raise ModelDirError(f'--{flag}={checkpoint} cannot be read ({reason})')
  return prefix


def resume_from(model_dir: str, checkpoint: str) -> str:
  """Makes `checkpoint` the one the next run of `model_dir` restores.

  Rewrites the checkpoint state file (atomically, relative paths) to list
  the intact checkpoints up to `checkpoint`. Newer checkpoint files stay on
  disk, unlisted; the next run overwrites them as it saves.

  Args:
    model_dir: the model dir.
    checkpoint: a checkpoint prefix in `model_dir`: absolute, relative to the
      working dir, or relative to `model_dir`.

  Returns:
    The checkpoint's prefix as `checkpoint_prefixes` names it.

  Raises:
    ModelDirError: if it is not an intact checkpoint of `model_dir`.
  """
  prefix = find_checkpoint(model_dir, checkpoint)
  prefixes = checkpoint_prefixes(model_dir)
  kept = [p for p in prefixes[:prefixes.index(prefix)]
          if damage(p) is None] + [prefix]
  relative = [os.path.basename(p) for p in kept]
  state = tf1.train.generate_checkpoint_state_proto(
      model_dir, relative[-1], relative)
  target = os.path.join(model_dir, STATE_FILENAME)
  with tf.io.gfile.GFile(target + '.tmp', 'w') as f:
    f.write(text_format.MessageToString(state))
  tf.io.gfile.rename(target + '.tmp', target, overwrite=True)
  return prefix


def remove_stale_temp_dirs(model_dir: str) -> List[str]:
  """Deletes `*.ckpt-N_temp*` dirs a killed checkpoint write left behind.

  Call it only while holding `exclusive(model_dir)`: a live run's save
  writes into such a dir.

  Returns:
    The removed paths.
  """
  if not tf.io.gfile.isdir(model_dir):
    return []
  removed = []
  for name in tf.io.gfile.listdir(model_dir):
    path = os.path.join(model_dir, name.rstrip('/'))
    if _TEMP_DIR.match(name.rstrip('/')) and tf.io.gfile.isdir(path):
      if _is_local(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        tf.io.gfile.rmtree(path)
      removed.append(path)
  if removed:
    logging.info('Removed %d unfinished checkpoint dir(s) of an earlier run: '
                 '%s', len(removed), ', '.join(removed))
  return removed


class CheckpointSaver(tf1.train.CheckpointSaverHook):
  """Saves checkpoints without writing the graph again on every start.

  The estimator's own saver hook adds the graph and its meta graph to a new
  events file on every start (tens of MB for a full search space) and writes
  `graph.pbtxt` and a `.meta` file next to every checkpoint, so a run
  restarted a few times grows by hundreds of MB. This one writes the graph
  to the events only when asked (the first start of a run) and never writes
  `graph.pbtxt` or `.meta` files; it flushes the events at every checkpoint,
  so what was logged up to a checkpoint survives a kill.

  Pass it first among `train(hooks=...)`, with the RunConfig's own
  checkpoint saving off
  (`estimators.make_run_config(save_checkpoints_steps=None)`).
  """

  def __init__(self, model_dir: str, save_steps: int, write_graph: bool):
    super().__init__(model_dir, save_steps=save_steps, save_graph_def=False)
    self._model_dir = model_dir
    self._write_graph = write_graph

  def begin(self):
    # Not the base class's: its cached writer is created with the graph,
    # which writes the graph into every new process's events file.
    self._summary_writer = tf1.summary.FileWriter(self._model_dir)
    self._global_step_tensor = tf1.train.get_global_step()
    if self._global_step_tensor is None:
      raise RuntimeError('CheckpointSaver needs a global step')
    for listener in self._listeners:
      listener.begin()

  def after_create_session(self, session, coord):
    del coord
    step = session.run(self._global_step_tensor)
    if self._write_graph:
      self._summary_writer.add_graph(tf1.get_default_graph())
    # As the estimator's hook: the state at the restored step is saved first.
    self._save(session, step)
    self._timer.update_last_triggered_step(step)

  def _save(self, session, step):
    should_stop = super()._save(session, step)
    self._summary_writer.flush()
    return should_stop

  def end(self, session):
    super().end(session)
    self._summary_writer.close()
