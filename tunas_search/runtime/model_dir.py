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
    good checkpoints, and names the newest intact checkpoint; an unfinished
    save (a run killed or out of disk space while saving) is no checkpoint
    and no damage (`checkpoints`);
  * `remove_unfinished_saves` deletes what a killed checkpoint write left,
    and nothing else, only under the lock, before the run writes anything;
  * `prepare_restore` makes the state file name the checkpoint the run
    restores (`--resume_from`'s, or a first save killed before it was
    recorded) and names the checkpoints the run will write over;
  * `CheckpointSaver` never rewrites the checkpoint a run resumed from, and
    `DiskFullError` stops a run out of disk space in one line.
The checkpoint listings live in `checkpoints`; this module re-exports them.
"""

import contextlib
import datetime
import errno
import fcntl
import json
import os
import re
import shutil
import socket
from typing import Iterator, List, Optional

from absl import logging
import tensorflow as tf

# pylint: disable=unused-import
from tunas_search.runtime.checkpoints import checkpoint_prefixes
from tunas_search.runtime.checkpoints import damage
from tunas_search.runtime.checkpoints import find_checkpoint
from tunas_search.runtime.checkpoints import ModelDirError
from tunas_search.runtime.checkpoints import newest_intact
from tunas_search.runtime.checkpoints import resume_from
from tunas_search.runtime.checkpoints import STATE_FILENAME
from tunas_search.runtime.checkpoints import unfinished_saves
# pylint: enable=unused-import
from tunas_search.runtime import checkpoints
from tunas_search import config as config_lib
from tunas_search.tf_internals import estimator as tf_estimator

tf1 = tf.compat.v1

# Who holds the lock (written by the holder once its run goes ahead).
LOCK_FILENAME = '.tunas_search.lock'
_is_local = checkpoints.is_local


class Lock:
  """A model-dir lock, held from `acquire` until `exclusive` ends.

  The lock is an OS lock (flock) on the directory itself, so taking it
  writes nothing and the OS drops it when the holder dies.
  """

  def __init__(self, model_dir: str, new: bool):
    self.model_dir = model_dir
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
    if self._fd is not None or not _is_local(self.model_dir):
      return
    try:
      os.makedirs(self.model_dir, exist_ok=True)
      fd = os.open(self.model_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
      raise ModelDirError(f'cannot use model dir {self.model_dir}: '
                          f'{e.strerror or e}') from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise ModelDirError(
          f'model dir {self.model_dir} is in use by '
          f'{_holder(self.model_dir)}; wait for that run to end or use '
          'another --model_dir') from None
    if self._new and os.listdir(self.model_dir):
      # The checks saw no dir: what the other run wrote went unchecked.
      os.close(fd)
      raise ModelDirError(
          f'model dir {self.model_dir} was written by another run while '
          'this one started; rerun to resume it, or use another --model_dir')
    self._fd = fd

  @property
  def held(self) -> bool:
    """Whether this process holds the lock (never for a remote dir)."""
    return self._fd is not None

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
  leaves nothing behind. Remote dirs (gs://..., any path with a scheme)
  cannot be locked this way; they are used unlocked, with a warning, and
  nothing is deleted there (`remove_unfinished_saves`).

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
  checkpoints. Unfinished saves count as absent (`checkpoints`); so does a
  missing state file beside a first checkpoint only (step 0), which a kill
  before the state file was written leaves. Checkpoints the state file does
  not name are not the run's to restore: a damaged one is left (and named by
  `prepare_restore`), not refused. Reads, never writes.

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
  inventory = checkpoints.Inventory(model_dir)
  if inventory.state_error is not None:
    raise checkpoints.damaged_error(model_dir, inventory.state_error)
  prefixes = inventory.checkpoints()
  if (inventory.state is None and not inventory.files and
      not inventory.temporary):
    return
  # Also for unfinished saves alone: they are removed only from a dir that
  # tunas_search wrote.
  _check_config_file(model_dir)
  if inventory.state is None:
    if prefixes and not checkpoints.unrecorded_first_save(model_dir, None,
                                                          prefixes):
      first_only = all(checkpoints.step_of(p) == 0 for p in prefixes)
      raise checkpoints.damaged_error(model_dir, (
          f'checkpoint {prefixes[-1]} cannot be read '
          f'({inventory.damage(prefixes[-1])})' if first_only else
          'the checkpoint state file '
          f'{os.path.join(model_dir, STATE_FILENAME)} is missing'))
    return
  latest = inventory.latest()
  reason = inventory.damage(latest)
  if reason is not None:
    raise checkpoints.damaged_error(
        model_dir, f'checkpoint {latest} cannot be read ({reason})',
        before=latest)


def restore_point(model_dir: str,
                  resume_from: Optional[str] = None) -> Optional[str]:
  """The checkpoint a run of a checked dir restores: `resume_from`, else the
  state file's latest, else an unrecorded first save; None for a new run."""
  if resume_from:
    return find_checkpoint(model_dir, resume_from)
  state = checkpoints.read_state(model_dir)
  if state is not None:
    return checkpoints.join(model_dir, state.model_checkpoint_path)
  return checkpoints.unrecorded_first_save(model_dir, state,
                                           checkpoint_prefixes(model_dir))


def _remove(path: str) -> None:
  if not tf.io.gfile.isdir(path):
    tf.io.gfile.remove(path)
  elif _is_local(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    tf.io.gfile.rmtree(path)


def remove_unfinished_saves(lock: Lock) -> List[str]:
  """Deletes the unfinished saves and temporary files of killed runs in the
  locked dir (`checkpoints.Inventory.garbage`), nothing else; one log line.

  Only while `lock` is held: a live run's save is unfinished while it writes,
  and only the lock keeps live runs out. A remote dir cannot be locked
  (`exclusive`), so there nothing is deleted and one line names what is left
  (no run reads it). Call it once `check` has passed and before the run
  writes anything, so that a rerun on a disk that is still full frees the
  failed save's space first; before `prepare_restore`, whose `resume_from`
  rewrites the state file the garbage is told by.

  Args:
    lock: the model dir's lock (`exclusive`), acquired.

  Returns:
    The removed paths, sorted.
  """
  files, temporary = checkpoints.Inventory(lock.model_dir).garbage()
  garbage = files + temporary  # A temp dir proves its save unfinished: last.
  if not garbage:
    return []
  if not lock.held:
    logging.warning(
        'Left %d file(s) of checkpoint saves that did not finish in %s: it '
        'is not a local directory, so no lock keeps other runs out and one '
        'may be writing them (no run reads them; delete them once no run '
        'uses the dir): %s', len(garbage), lock.model_dir,
        ', '.join(garbage))
    return []
  for path in garbage:
    _remove(path)
  logging.info('Removed %d file(s) of checkpoint saves that did not finish '
               '(a run killed or out of disk space while saving); no run can '
               'resume from them: %s', len(garbage), ', '.join(garbage))
  return sorted(garbage)


def prepare_restore(model_dir: str,
                    resume_from: Optional[str] = None) -> Optional[str]:
  """Makes the state file name the checkpoint the run restores; logs one
  line naming the checkpoints the run will write over.

  The checkpoint is `resume_from`'s (`checkpoints.resume_from`), the state
  file's latest, or a first save killed before the state file was written,
  which is then recorded as the Saver would have. Checkpoint files the state
  file does not name, saved under the run's own name (`model.ckpt-N`) at a
  later step than the restored one, are left as they are; the Saver writes
  over them when it saves that step again, and the log line says so. Call it
  after `remove_unfinished_saves`.

  Args:
    model_dir: a checked model dir (`check`).
    resume_from: the checkpoint to continue from instead of the latest.

  Returns:
    The checkpoint the run restores; None for a new run.
  """
  if resume_from:
    restored = checkpoints.resume_from(model_dir, resume_from)
  else:
    restored = restore_point(model_dir)
    if restored is not None and checkpoints.read_state(model_dir) is None:
      checkpoints.write_state(model_dir, restored, [restored])
      logging.info('Recorded %s, saved by a run killed before it wrote the '
                   'checkpoint state file; resuming from it', restored)
  _log_checkpoints_in_the_way(model_dir, restored)
  return restored


def _log_checkpoints_in_the_way(model_dir: str,
                                restored: Optional[str]) -> None:
  inventory = checkpoints.Inventory(model_dir)
  after = -1 if restored is None else checkpoints.step_of(restored)
  in_the_way = [
      p for p in inventory.not_named()
      if os.path.basename(p).startswith(checkpoints.RUN_BASENAME + '-') and
      checkpoints.step_of(p) > after]
  if not in_the_way:
    return
  described = []
  for prefix in in_the_way:
    reason = inventory.damage(prefix)
    described.append(os.path.basename(prefix) + (
        ' (complete)' if reason is None else f' (cannot be read: {reason})'))
  logging.warning(
      'Left as they are in %s: %s, newer than %s and not named by the '
      'checkpoint state file; the run writes over a step\'s files when it '
      'saves that step again: move them elsewhere to keep them', model_dir,
      ', '.join(described),
      'the checkpoint the run resumes from' if restored else 'a new run')


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


class DiskFullError(RuntimeError):
  """A write failed for lack of disk space; the run stopped. One line,
  naming the path and the checkpoint a rerun resumes from."""


# How TensorFlow's file systems report ENOSPC: `<path>; No space left on
# device` (a ResourceExhaustedError from a session run, a RuntimeError from
# the events writer's thread).
_NO_SPACE = 'No space left on device'
_NO_SPACE_PATH = re.compile(r'(\S+); ' + _NO_SPACE)


def no_space_path(error: BaseException) -> Optional[str]:
  """The path a write failed on for lack of space ('' if the error names
  none); None if `error` is about something else."""
  if isinstance(error, OSError) and error.errno == errno.ENOSPC:
    return error.filename or ''
  text = str(getattr(error, 'message', None) or error)
  if isinstance(error, DiskFullError) or _NO_SPACE not in text:
    return None
  found = _NO_SPACE_PATH.search(text)
  return found.group(1) if found else ''


@contextlib.contextmanager
def stopping_on_full_disk(model_dir: str) -> Iterator[None]:
  """Turns a failed write for lack of space inside the block into one line.

  The Saver writes a new checkpoint beside the old ones and records it only
  once it is whole (`checkpoints`), so the checkpoints recorded before stay
  intact, and a rerun after space is freed removes the unfinished save and
  resumes.

  Raises:
    DiskFullError: naming the path, the newest recorded checkpoint and what
      to do.
  """
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    path = no_space_path(e)
    if path is None:
      raise
    latest = tf.train.latest_checkpoint(model_dir)
    kept = (f'checkpoints up to {latest} are intact' if latest else
            'no checkpoint was written yet')
    raise DiskFullError(
        f'no space left on device writing {path or model_dir}; the run '
        f'stopped and {kept}: free disk space and rerun the same command to '
        'resume') from None


def write_text(path: str, text: str) -> None:
  """Writes a file a user keeps atomically: whole or as it was.

  Under the model dir's lock (`exclusive`): the temporary name is fixed, so
  a kill leaves at most one, which the next write replaces.
  """
  temporary = path + '.tmp'
  try:
    with tf.io.gfile.GFile(temporary, 'w') as f:
      f.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)
  finally:
    if tf.io.gfile.exists(temporary):
      tf.io.gfile.remove(temporary)


class CheckpointSaver(tf_estimator.EventsOnceSaverHook):
  """Saves checkpoints without writing the graph again on every start.

  The estimator's own saver hook adds the graph and its meta graph to a new
  events file on every start (tens of MB for a full search space) and writes
  `graph.pbtxt` and a `.meta` file next to every checkpoint, so a run
  restarted a few times grows by hundreds of MB. This one writes the graph
  to the events only when asked (the first start of a run) and never writes
  `graph.pbtxt` or `.meta` files; it flushes the events at every checkpoint,
  so what was logged up to a checkpoint survives a kill.

  A start never rewrites the checkpoint it resumed from: the estimator's
  hook saves the restored step again at every start, and a kill while that
  save rewrote the index in place damaged the run's only resume point.

  Pass it first among `train(hooks=...)`, with the RunConfig's own
  checkpoint saving off
  (`estimators.make_run_config(save_checkpoints_steps=None)`).
  """

  def saved_at_start(self, step: int) -> bool:
    # As the estimator's hook, the state at the restored step is saved
    # first, but only if no checkpoint holds it yet: rewriting the one the
    # session restored would put the run's only resume point at risk while
    # its index is rewritten in place (`checkpoints`, step 2).
    latest = tf.train.latest_checkpoint(self._model_dir)
    return latest is not None and checkpoints.step_of(latest) == step
