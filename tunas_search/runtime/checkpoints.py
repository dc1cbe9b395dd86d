"""A model dir's checkpoints: the state file, complete ones, unfinished saves.

`tf.train.Saver` (sharded, as the estimator's; TF 2.15 `saver.py`) writes
a checkpoint `<prefix>` = `<model_dir>/model.ckpt-N` in this order:
  1. each shard into `<prefix>_temp/part-*` (through `.tempstate*` names);
  2. `MergeV2Checkpoints` renames the shards' data to `<prefix>.data-*`, then
     writes `<prefix>.index` in place, then deletes the temp dir;
  3. the state file `checkpoint` is replaced atomically (through
     `checkpoint.tmp<32 hex digits>`) to name the new checkpoint;
  4. the oldest checkpoint beyond `keep_checkpoint_max`, which the new state
     no longer lists, is deleted: its index first, then its data.
A kill or a full disk at any instant stops this somewhere. What it leaves is
an *unfinished save*, garbage that `remove_unfinished_saves` deletes and that
every listing here treats as absent:
  * a `<prefix>_temp*` dir (1, 2) or an atomic write's `*.tmp<hex>` (3);
  * data without an index, of a checkpoint the state file does not list
    (2, 4);
  * a checkpoint newer than the state file's latest (or in a dir without a
    state file) that cannot be read completely: an empty or partial index
    (2), missing or truncated data;
  * a complete checkpoint older than every listed one while the state lists
    `keep_checkpoint_max` of them: a deletion (4) that did not finish.
Everything else is the user's: a listed checkpoint that cannot be read is
damage (`model_dir.check` refuses it and names the newest intact one), and a
complete checkpoint newer than the state file (left by `resume_from`, or
saved just before a kill in 3) stays as TensorFlow leaves it: a run resumes
from the state file's latest and overwrites it when it saves that step again.
A first checkpoint (step 0) saved before any state file was written is
recorded by `remove_unfinished_saves`, and resumed from. Beside a state file
that cannot be parsed only temp dirs and leftovers count as unfinished.
"""

import os
import re
import shutil
from typing import Dict, List, NamedTuple, Optional, Set

from absl import logging
from google.protobuf import text_format
import numpy as np
import tensorflow as tf

from tunas_search import config as config_lib

tf1 = tf.compat.v1

STATE_FILENAME = 'checkpoint'  # The name tf.train.Saver gives it.
# The files of a checkpoint: `<prefix>.index`, `.data-?????-of-?????`, and
# the `.meta` the estimator's own saver hook writes.
_CHECKPOINT_FILE = re.compile(
    r'^(.*\.ckpt-(\d+))\.(index|data-\d{5}-of-\d{5}|meta)$')
# Step 1's temporary dir (`<prefix>_temp`, or `<prefix>_temp_<uuid>`).
_TEMP_DIR = re.compile(r'^.*\.ckpt-\d+_temp.*$')
# TensorFlow's atomic writes (`file_io.atomic_write_string_to_file`: the
# state file, `.meta`, `graph.pbtxt`) and `resume_from`'s state file.
_LEFTOVER = re.compile(r'^(.*\.tmp[0-9a-f]{32}|checkpoint\.tmp)$')


class ModelDirError(config_lib.ConfigError):
  """The model dir cannot be used as it is; the message is one line.

  A ConfigError, so every CLI reports it as bad input (one line, exit 2).
  """


def is_local(path: str) -> bool:
  return '://' not in path


def join(model_dir: str, path: str) -> str:
  """`path` (absolute, or relative to `model_dir`) as `checkpoint_prefixes`
  names it, so the two compare equal."""
  if not is_local(path):
    return path  # Already a full gs://... path.
  if not is_local(model_dir):
    return f'{model_dir.rstrip("/")}/{path}'
  return os.path.normpath(path if os.path.isabs(path) else
                          os.path.join(model_dir, path))


def step_of(prefix: str) -> Optional[int]:
  """N of a checkpoint prefix `.../model.ckpt-N`; None for another name."""
  match = re.search(r'-(\d+)$', prefix)
  return int(match.group(1)) if match else None


class _Scan(NamedTuple):
  """What a model dir holds that a save writes.

  Attributes:
    files: checkpoint prefix -> its files (index, data, meta).
    indexed: the prefixes that have an index file.
    temporary: temp dirs and atomic-write leftovers.
  """
  files: Dict[str, List[str]]
  indexed: Set[str]
  temporary: List[str]


def _scan(model_dir: str) -> _Scan:
  files, indexed, temporary = {}, set(), []
  if not tf.io.gfile.isdir(model_dir):
    return _Scan(files, indexed, temporary)
  for name in sorted(n.rstrip('/') for n in tf.io.gfile.listdir(model_dir)):
    path = join(model_dir, name)
    match = _CHECKPOINT_FILE.match(name)
    if match:
      prefix = join(model_dir, match.group(1))
      files.setdefault(prefix, []).append(path)
      if match.group(3) == 'index':
        indexed.add(prefix)
    elif _LEFTOVER.match(name) or (_TEMP_DIR.match(name) and
                                   tf.io.gfile.isdir(path)):
      temporary.append(path)
  return _Scan(files, indexed, temporary)


def _empty_state():
  """An empty CheckpointState proto (its class has no public name)."""
  state = tf1.train.generate_checkpoint_state_proto('.', 'x')
  state.Clear()
  return state


def _parse_state(model_dir: str):
  """The state file's proto; None if absent; raises ValueError for garbage."""
  path = os.path.join(model_dir, STATE_FILENAME)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      state = text_format.Parse(f.read(), _empty_state())
  except (text_format.ParseError, UnicodeDecodeError) as e:
    raise ValueError(f'{path} is not a checkpoint state file '
                     f'({str(e).splitlines()[0][:80]})') from None
  if not state.model_checkpoint_path:
    raise ValueError(f'{path} names no checkpoint')
  return state


def read_state(model_dir: str):
  """The parsed checkpoint state file, None if absent.

  Raises:
    ModelDirError: if the file is not a checkpoint state, naming the newest
      intact checkpoint.
  """
  try:
    return _parse_state(model_dir)
  except ValueError as e:
    raise damaged_error(model_dir, str(e)) from None


_GARBAGE = object()  # A state file that cannot be parsed.


def _state_or_garbage(model_dir: str):
  """The state file's proto; None if absent; `_GARBAGE` if unparsable."""
  try:
    return _parse_state(model_dir)
  except ValueError:
    return _GARBAGE


def _listed(model_dir: str, state) -> Set[str]:
  if state is None:
    return set()
  return {join(model_dir, p) for p in
          [state.model_checkpoint_path, *state.all_model_checkpoint_paths]}


def _unfinished(model_dir: str, scan: _Scan, state,
                keep_checkpoint_max: Optional[int]) -> List[str]:
  """The paths of unfinished saves (module docstring), sorted."""
  if state is _GARBAGE:  # No record to tell an unfinished checkpoint by.
    return sorted(scan.temporary)
  listed = _listed(model_dir, state)
  latest = step_of(state.model_checkpoint_path) if state else None
  oldest = min((s for s in map(step_of, listed) if s is not None),
               default=None)
  found = list(scan.temporary)
  for prefix, files in scan.files.items():
    if prefix in listed:
      continue  # The user's, even if damaged.
    step = step_of(prefix)
    if prefix not in scan.indexed:
      found += files
    elif latest is None or step > latest:
      if damage(prefix) is not None:
        found += files
    elif (keep_checkpoint_max and len(listed) >= keep_checkpoint_max and
          oldest is not None and step < oldest and damage(prefix) is None):
      found += files
  return sorted(found)


def unfinished_saves(model_dir: str,
                     keep_checkpoint_max: Optional[int] = None) -> List[str]:
  """The files and dirs of unfinished saves in `model_dir` (module
  docstring); reads, never writes.

  Args:
    model_dir: the model dir.
    keep_checkpoint_max: the run's; None never counts a complete checkpoint
      as an unfinished deletion.
  """
  return _unfinished(model_dir, _scan(model_dir), _state_or_garbage(model_dir),
                     keep_checkpoint_max)


def checkpoint_prefixes(model_dir: str) -> List[str]:
  """Every checkpoint in `model_dir` with an index file, oldest first,
  except unfinished saves.

  None in a dir that does not exist (yet: `model_dir.exclusive` creates it
  late).
  """
  scan = _scan(model_dir)
  unfinished = set(_unfinished(model_dir, scan, _state_or_garbage(model_dir),
                               None))
  return sorted((p for p in scan.indexed if p + '.index' not in unfinished),
                key=step_of)


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


def damaged_error(model_dir: str, what: str,
                  before: Optional[str] = None) -> ModelDirError:
  """One line: what is damaged, and the newest intact checkpoint to resume
  from (older than `before` if given)."""
  good = newest_intact(model_dir, before=before)
  if good is None:
    advice = 'no intact checkpoint is left; use a new --model_dir'
  else:
    advice = (f'the newest intact checkpoint is {good}; rerun with '
              f'--resume_from={good} to continue from it, or use a new '
              '--model_dir')
  return ModelDirError(f'model dir {model_dir} is damaged: {what}; {advice}')


def unrecorded_first_save(model_dir: str, state,
                          prefixes: List[str]) -> Optional[str]:
  """The checkpoint of a first save killed before the state file was
  written (3): the only checkpoints, at step 0, and no state file."""
  if state is None and prefixes and all(step_of(p) == 0 for p in prefixes):
    return prefixes[-1]
  return None


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
    ModelDirError: if it is not one (an unfinished save is none), listing
      the dir's checkpoints, or the dir does not exist.
  """
  if not tf.io.gfile.isdir(model_dir):
    raise ModelDirError(f'--{flag}={checkpoint}: model dir {model_dir} does '
                        'not exist')
  prefixes = checkpoint_prefixes(model_dir)
  # As printed by this module (relative to the working dir) or relative to
  # the model dir; compared as absolute paths, so that either spelling of a
  # local path matches.
  candidates = [join(model_dir, checkpoint)]
  if is_local(checkpoint):
    candidates.insert(0, os.path.normpath(checkpoint))
  key = os.path.abspath if is_local(model_dir) else (lambda path: path)
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


def _remove(path: str) -> None:
  if not tf.io.gfile.isdir(path):
    tf.io.gfile.remove(path)
  elif is_local(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    tf.io.gfile.rmtree(path)


def remove_unfinished_saves(model_dir: str,
                            keep_checkpoint_max: Optional[int] = None
                            ) -> List[str]:
  """Deletes the unfinished saves of killed runs; logs one line if any.

  A first save killed before the state file was written is then recorded
  in a new state file (`resume_from`), so the run resumes from it. Call it
  only while holding `model_dir.exclusive(model_dir)` (a live run's save is
  unfinished while it writes) and once `model_dir.check` has passed.

  Args:
    model_dir: the model dir.
    keep_checkpoint_max: the run's (`unfinished_saves`).

  Returns:
    The removed paths.
  """
  removed = unfinished_saves(model_dir, keep_checkpoint_max)
  for path in removed:
    _remove(path)
  if removed:
    logging.info('Removed %d file(s) of checkpoint saves that did not '
                 'finish (a run killed or out of disk space while saving); '
                 'no run can resume from them: %s', len(removed),
                 ', '.join(removed))
  first = unrecorded_first_save(model_dir, _state_or_garbage(model_dir),
                                checkpoint_prefixes(model_dir))
  if first is not None:
    resume_from(model_dir, first)
    logging.info('Recorded %s, saved by a run killed before it wrote the '
                 'checkpoint state file; resuming from it', first)
  return removed
