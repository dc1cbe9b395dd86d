"""Model dirs as a kill at each instant of a checkpoint save leaves them, and
the complete checkpoints a dir holds, counted without tunas_search.

Built by hand from a complete checkpoint, following the order in which
`tf.train.Saver` writes (tunas_search/runtime/checkpoints.py): no timing involved.
"""

import glob
import os
import shutil
from typing import Dict, List

DATA = '.data-00000-of-00001'
# A kill while (1) a shard is written, (2) after the data's rename, before
# the index, (2) while the index is written (empty, then half written), (2)
# once the index is whole, before the temp dir is deleted, and (3) while the
# state file is replaced. The last two leave the new checkpoint complete.
KINDS = ('temp_dir', 'data_without_index', 'empty_index', 'partial_index',
         'index_written', 'state_file_write')
# The kinds that leave the new checkpoint complete (it stays).
COMPLETE_KINDS = ('index_written', 'state_file_write')


def checkpoint_files(model_dir: str) -> Dict[str, bytes]:
  """Name -> bytes of every checkpoint file and the state file."""
  files = {}
  for path in glob.glob(os.path.join(model_dir, '*.ckpt-*')) + glob.glob(
      os.path.join(model_dir, 'checkpoint')):
    if os.path.isfile(path):
      with open(path, 'rb') as f:
        files[os.path.basename(path)] = f.read()
  return files


def complete_checkpoints(model_dir: str) -> Dict[str, bytes]:
  """Name -> index bytes of every checkpoint whose variables all read back.

  Found by TensorFlow's reader alone (every `*.index` in the dir), not by
  tunas_search's listings, so that a test counts what a user has.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  found = {}
  for index in sorted(glob.glob(os.path.join(model_dir, '*.index'))):
    prefix = index[:-len('.index')]
    try:
      reader = tf.train.load_checkpoint(prefix)
      for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError):
      continue
    with open(index, 'rb') as f:
      found[os.path.basename(prefix)] = f.read()
  return found


def copy_checkpoint(source: str, target: str) -> None:
  """Copies the checkpoint `source` (a prefix) to the prefix `target`."""
  for suffix in ('.index', DATA):
    shutil.copyfile(source + suffix, target + suffix)


def truncate(path: str, fraction: float) -> None:
  with open(path, 'r+b') as f:
    f.truncate(int(os.path.getsize(path) * fraction))


def kill_save(model_dir: str, kind: str, source: str, step: int) -> List[str]:
  """Leaves `model.ckpt-<step>` in `model_dir` as a save killed at `kind`.

  Args:
    model_dir: a model dir; its state file is left as it is.
    kind: one of KINDS.
    source: the name of a complete checkpoint of the dir ('model.ckpt-4'),
      whose files stand for the new checkpoint's.
    step: the new checkpoint's step, newer than the state file's latest.

  Returns:
    The names the kill leaves that are garbage (sorted); for the
    COMPLETE_KINDS not the new checkpoint, which is complete and stays.
  """
  prefix = f'model.ckpt-{step}'
  temp = os.path.join(model_dir, prefix + '_temp')
  path = os.path.join(model_dir, prefix)
  os.makedirs(temp)
  if kind == 'temp_dir':  # (1): the shard's data, half written.
    part = os.path.join(temp, 'part-00000-of-00001' + DATA + '.tempstate7')
    shutil.copyfile(os.path.join(model_dir, source + DATA), part)
    truncate(part, 0.5)
    return [prefix + '_temp']
  copy_checkpoint(os.path.join(model_dir, source), path)
  if kind == 'data_without_index':  # (2): the shard's index is still there.
    os.rename(path + '.index', os.path.join(temp, 'part-00000-of-00001.index'))
    return sorted([prefix + DATA, prefix + '_temp'])
  if kind in ('empty_index', 'partial_index'):
    truncate(path + '.index', 0.0 if kind == 'empty_index' else 0.5)
    return sorted([prefix + '.index', prefix + DATA, prefix + '_temp'])
  if kind == 'index_written':
    return [prefix + '_temp']
  os.rmdir(temp)
  if kind == 'state_file_write':
    leftover = 'checkpoint.tmp' + '0123456789abcdef' * 2
    shutil.copyfile(os.path.join(model_dir, 'checkpoint'),
                    os.path.join(model_dir, leftover))
    return [leftover]
  raise ValueError(f'unknown kind {kind!r}; valid kinds: {", ".join(KINDS)}')
