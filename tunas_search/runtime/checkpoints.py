"""A model dir's checkpoints: what is one, and what is a save's garbage.

`tf.train.Saver` (sharded, as the estimator's; TF 2.15 `saver.py`) writes
a checkpoint `<prefix>` = `<model_dir>/model.ckpt-N` in this order:
  1. each shard into `<prefix>_temp/part-*` (through `.tempstate*` names);
  2. `MergeV2Checkpoints` renames the shards' data to `<prefix>.data-*`,
     writes `<prefix>.index` in place, then deletes the temp dir;
  3. the state file `checkpoint` is replaced atomically (through
     `checkpoint.tmp<32 hex digits>`) to name the new checkpoint;
  4. the oldest checkpoint the state file lists beyond `keep_checkpoint_max`
     is deleted: its index first, then its data.
A kill or a full disk can stop this at any instant. `Inventory` sorts what a
dir holds, once, for every caller (the listings, `model_dir.check`, the
resume, export, analysis and the clean-up):
  * *temporary files*: `<prefix>_temp` dirs (1, 2) and atomic writes'
    `*.tmp<hex>` (3);
  * an *unfinished save*: a checkpoint whose save provably did not finish:
    its `<prefix>_temp` dir is still there (the merge deletes it last), it
    cannot be read (no index, or an empty or partial one), and the state
    file neither names it nor anything newer (or there is no state file);
  * a *checkpoint*: any other prefix with an index, whatever its name (a
    user's `milestone.ckpt-N` too) or age: *complete* if every variable reads
    back (`damage`), *damaged* if not;
  * other files with checkpoint names (data without an index and without
    its save's temp dir: a deletion (4) cut short, or a user's damage) are
    no checkpoint, and nobody's garbage either.
Temporary files and unfinished saves are the only garbage: no run can use
them, the listings ignore them, and `model_dir.remove_unfinished_saves`
deletes them. A complete checkpoint is never garbage; a damaged one the state
file names as latest is refused by `model_dir.check`, never removed.
"""

import os
import re
from typing import Dict, List, Optional, Set, Tuple

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
# Step 1's temporary dir (`<prefix>_temp`; `<prefix>_temp_<hex>` in other
# TensorFlow versions).
_TEMP_DIR = re.compile(r'^(.*\.ckpt-\d+)_temp(_[0-9a-f]+)?$')
# TensorFlow's atomic writes (`file_io.atomic_write_string_to_file`: the
# state file, `.meta`, `graph.pbtxt`) and `resume_from`'s state file.
_LEFTOVER = re.compile(r'^(.*\.tmp[0-9a-f]{32}|checkpoint\.tmp)$')
# The prefix the estimator saves under: a checkpoint with this name and a
# step the run saves again is written over.
RUN_BASENAME = 'model.ckpt'


class ModelDirError(config_lib.ConfigError):
  """The model dir cannot be used as it is; the message is one line.

  A ConfigError, so every CLI reports it as bad input (one line, exit 2).
  """


def is_local(path: str) -> bool:
  return '://' not in path


def join(model_dir: str, path: str) -> str:
  """`path` (absolute, or relative to `model_dir`) as `Inventory` names it,
  so the two compare equal."""
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


def _empty_state():
  """An empty CheckpointState proto (its class has no public name)."""
  # Listing 'x' spares the log line TensorFlow writes when it adds it.
  state = tf1.train.generate_checkpoint_state_proto('.', 'x', ['x'])
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


class Inventory:
  """What a model dir holds that a save writes, sorted as the module
  docstring says; reads, never writes.

  Attributes:
    model_dir: the dir.
    state: the state file's proto; None if absent or unparsable.
    state_error: why the state file cannot be parsed; None if it can (or
      is absent).
    files: checkpoint prefix -> its files (index, data, meta), sorted.
    temporary: temp dirs and atomic-write leftovers, sorted.
  """

  def __init__(self, model_dir: str):
    self.model_dir = model_dir
    self.state, self.state_error = None, None
    self.files: Dict[str, List[str]] = {}
    self.temporary: List[str] = []
    self._indexed: Set[str] = set()
    self._saving: Set[str] = set()  # Prefixes whose temp dir is there.
    self._damage: Dict[str, Optional[str]] = {}
    if not tf.io.gfile.isdir(model_dir):
      return
    try:
      self.state = _parse_state(model_dir)
    except ValueError as e:
      self.state_error = str(e)
    for name in sorted(n.rstrip('/') for n in tf.io.gfile.listdir(model_dir)):
      self._add(name)

  def _add(self, name: str) -> None:
    path = join(self.model_dir, name)
    match = _CHECKPOINT_FILE.match(name)
    temp = _TEMP_DIR.match(name)
    if match:
      prefix = join(self.model_dir, match.group(1))
      self.files.setdefault(prefix, []).append(path)
      if match.group(3) == 'index':
        self._indexed.add(prefix)
    elif temp and tf.io.gfile.isdir(path):
      self.temporary.append(path)
      self._saving.add(join(self.model_dir, temp.group(1)))
    elif _LEFTOVER.match(name):
      self.temporary.append(path)

  def named(self) -> Set[str]:
    """The prefixes the state file names (its latest among them)."""
    if self.state is None:
      return set()
    return {join(self.model_dir, p) for p in
            [self.state.model_checkpoint_path,
             *self.state.all_model_checkpoint_paths]}

  def latest(self) -> Optional[str]:
    """The state file's latest checkpoint; None without a readable one."""
    if self.state is None:
      return None
    return join(self.model_dir, self.state.model_checkpoint_path)

  def damage(self, prefix: str) -> Optional[str]:
    """`damage(prefix)`, read once per inventory."""
    if prefix not in self._damage:
      self._damage[prefix] = damage(prefix)
    return self._damage[prefix]

  def unfinished(self, prefix: str) -> bool:
    """Whether `prefix` is an unfinished save (module docstring)."""
    if prefix not in self._saving or self.state_error is not None:
      return False  # No record to compare with beside a garbage state.
    named = self.named()
    steps = [step_of(p) for p in named]
    if prefix in named or None in steps or (
        steps and step_of(prefix) <= max(steps)):
      return False
    return self.damage(prefix) is not None

  def checkpoints(self) -> List[str]:
    """Every checkpoint, complete or damaged, oldest first."""
    return sorted((p for p in self._indexed if not self.unfinished(p)),
                  key=lambda p: (step_of(p), p))

  def garbage(self) -> Tuple[List[str], List[str]]:
    """(the files of unfinished saves, the temporary files), each sorted.

    Delete them in this order: a temp dir is what proves its save
    unfinished, so it goes last.
    """
    files = [path for prefix in sorted(self.files)
             if self.unfinished(prefix) for path in self.files[prefix]]
    return files, list(self.temporary)

  def not_named(self) -> List[str]:
    """The prefixes with files, no unfinished save, the state file does not
    name, oldest first."""
    named = self.named()
    return sorted((p for p in self.files
                   if p not in named and not self.unfinished(p)),
                  key=lambda p: (step_of(p), p))


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


def unfinished_saves(model_dir: str) -> List[str]:
  """The files and dirs of unfinished saves and temporary files in
  `model_dir` (module docstring), sorted; reads, never writes."""
  files, temporary = Inventory(model_dir).garbage()
  return sorted(files + temporary)


def checkpoint_prefixes(model_dir: str) -> List[str]:
  """Every checkpoint in `model_dir`, complete or damaged, oldest first;
  none of an unfinished save (`Inventory.checkpoints`).

  None in a dir that does not exist (yet: `model_dir.exclusive` creates it
  late).
  """
  return Inventory(model_dir).checkpoints()


def newest_intact(model_dir: str, require_finite: bool = False,
                  before: Optional[str] = None) -> Optional[str]:
  """The newest complete checkpoint (older than `before` if given)."""
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
  written (3): no state file, only complete checkpoints at step 0."""
  if (state is None and prefixes and all(step_of(p) == 0 for p in prefixes)
      and damage(prefixes[-1]) is None):
    return prefixes[-1]
  return None


def find_checkpoint(model_dir: str, checkpoint: str,
                    flag: Optional[str] = 'resume_from') -> str:
  """The prefix of `checkpoint` if it is a complete checkpoint of the dir.

  Args:
    model_dir: the model dir.
    checkpoint: a checkpoint prefix in `model_dir`: absolute, relative to the
      working dir, or relative to `model_dir`.
    flag: the flag that named it, for the message; None names the
      checkpoint alone.

  Returns:
    The checkpoint's prefix as `checkpoint_prefixes` names it.

  Raises:
    ModelDirError: if it is not one (an unfinished save is none), listing
      the dir's checkpoints; if it cannot be read; or if the dir does not
      exist.
  """
  named = f'--{flag}={checkpoint}' if flag else checkpoint
  if not tf.io.gfile.isdir(model_dir):
    raise ModelDirError(f'{named}: model dir {model_dir} does not exist')
  inventory = Inventory(model_dir)
  prefixes = inventory.checkpoints()
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
    unfinished = any(key(c) == key(p) and inventory.unfinished(p)
                     for c in candidates for p in inventory.files)
    raise ModelDirError(f'{named} is not a checkpoint of {model_dir}'
                        + (' (its save did not finish)' if unfinished else '')
                        + f'; checkpoints: {names}')
  reason = inventory.damage(prefix)
  if reason is not None:
    raise ModelDirError(f'{named} cannot be read ({reason})')
  return prefix


def write_state(model_dir: str, latest: str, listed: List[str]) -> None:
  """Replaces the checkpoint state file atomically (relative paths).

  Args:
    model_dir: the model dir.
    latest: the checkpoint the next run restores.
    listed: the checkpoints the Saver may delete beyond
      `keep_checkpoint_max`, oldest first (`latest` among them or not).
  """
  state = _empty_state()
  state.model_checkpoint_path = os.path.basename(latest)
  state.all_model_checkpoint_paths.extend(os.path.basename(p) for p in listed)
  target = os.path.join(model_dir, STATE_FILENAME)
  with tf.io.gfile.GFile(target + '.tmp', 'w') as f:
    f.write(text_format.MessageToString(state))
  tf.io.gfile.rename(target + '.tmp', target, overwrite=True)


def resume_from(model_dir: str, checkpoint: str) -> str:
  """Makes `checkpoint` the one the next run of `model_dir` restores.

  Rewrites the checkpoint state file to name it as the latest. The Saver
  deletes only checkpoints the state file lists (`keep_checkpoint_max`), so
  the new file lists only what the old one listed up to `checkpoint`
  (complete ones): a checkpoint the old file did not list, `checkpoint`
  itself included (a copy brought in, a backup restored), is never deleted
  by the run. Newer checkpoint files stay on disk, unlisted; the next run
  writes over those of the steps it saves again.

  Args:
    model_dir: the model dir.
    checkpoint: a checkpoint prefix in `model_dir`: absolute, relative to the
      working dir, or relative to `model_dir`.

  Returns:
    The checkpoint's prefix as `checkpoint_prefixes` names it.

  Raises:
    ModelDirError: if it is not a complete checkpoint of `model_dir`.
  """
  prefix = find_checkpoint(model_dir, checkpoint)
  inventory = Inventory(model_dir)
  listed = [] if inventory.state is None else [
      join(model_dir, p) for p in inventory.state.all_model_checkpoint_paths]
  prefixes = inventory.checkpoints()
  older = prefixes[:prefixes.index(prefix)]
  kept = [p for p in older if p in listed and damage(p) is None]
  write_state(model_dir, prefix, kept + ([prefix] if prefix in listed else []))
  return prefix
