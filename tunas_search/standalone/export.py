"""Exports a trained stand-alone network: SavedModel, float TFLite, latency.

The SavedModel's `serving_default` signature takes `images`: float32
[N, S, S, C] already preprocessed and normalised as the input pipeline does
it (`tunas_search.data.preprocessing`: resize or centre crop to S, then
`(x / 255 - mean) / std` per channel with the dataset's mean and std, which
`export_info.json` records), and returns `logits` and `probabilities`
(float32 [N, num_classes]). The inference graph is built with
`is_training=False` (BN uses its moving averages, no dropout) in float32,
whatever precision the model was trained in.
"""

import dataclasses
import json
import os
from typing import List, Optional, Tuple

import tensorflow as tf

from tunas_search import data
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.runtime import tflite as tflite_lib
from tunas_search.space import architecture
from tunas_search.standalone import train_eval

tf1 = tf.compat.v1
SAVED_MODEL_DIRNAME = 'saved_model'
TFLITE_FILENAME = 'model.tflite'
INFO_FILENAME = 'export_info.json'
# Everything an export dir holds; a dir holding anything else is not ours.
EXPORT_ENTRIES = (SAVED_MODEL_DIRNAME, TFLITE_FILENAME, INFO_FILENAME)
# Hidden dirs next to the export dir: the new export while it is written,
# and the earlier one while the two are swapped.
TEMPORARY_SUFFIX = '.tmp'
ASIDE_SUFFIX = '.old'


class ExportError(ValueError):
  """A model cannot be exported; the message says why."""


class ExportFailedError(RuntimeError):
  """Writing an export failed part-way; the earlier export is unchanged."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
  """What `export_run` wrote (also saved as export_info.json).

  Attributes:
    export_dir: the directory holding everything below.
    saved_model_dir: the SavedModel.
    tflite_path: the float TFLite model, or None if not converted.
    checkpoint: the checkpoint exported.
    global_step: its step.
    search_space: the space `architecture` indexes.
    architecture: the architecture string.
    input_shape: [-1, S, S, C] (any batch size).
    mean: per-channel mean (of pixels in [0, 1]) the inputs were normalised
      with, or None if the dataset's statistics are unavailable.
    std: per-channel standard deviation, like `mean`.
  """
  export_dir: str
  saved_model_dir: str
  tflite_path: Optional[str]
  checkpoint: str
  global_step: int
  search_space: str
  architecture: str
  input_shape: List[int]
  mean: Optional[List[float]]
  std: Optional[List[float]]


def _sibling(export_dir: str, suffix: str) -> str:
  """A hidden name next to `export_dir` (same file system: renames work)."""
  parent, name = os.path.split(export_dir.rstrip('/'))
  return os.path.join(parent, f'.{name}{suffix}')


def _first_line(error: Exception) -> str:
  """The first line of an error's message, for one-line reports."""
  message = getattr(error, 'message', None) or str(error)
  return message.splitlines()[0] if message else type(error).__name__


def _fresh_dir(export_dir: str) -> str:
  """Checks that `export_dir` may be replaced; returns an empty dir to fill.

  The new export is written to `.<name>.tmp` next to `export_dir` and moved
  into place by `_swap_in`. Leftovers of an export killed part-way are
  cleaned up first: a temporary dir is removed, and an earlier export moved
  aside (`.<name>.old`) is restored if it never got replaced, else removed.
  Another export to the same dir must not be running meanwhile.

  Args:
    export_dir: where the export is to go.

  Returns:
    The new, empty temporary dir.

  Raises:
    ExportError: if `export_dir` holds anything but an earlier export, or
      the temporary dir cannot be created (e.g. under a file, or read-only).
  """
  gfile = tf.io.gfile
  temporary = _sibling(export_dir, TEMPORARY_SUFFIX)
  aside = _sibling(export_dir, ASIDE_SUFFIX)
  try:
    if not gfile.exists(export_dir) and gfile.exists(aside):
      gfile.rename(aside, export_dir)  # Killed between the swap's renames.
    if gfile.exists(export_dir):
      if not gfile.isdir(export_dir):
        raise ExportError(f'{export_dir} is a file, not an export directory; '
                          'choose another export dir')
      others = sorted({n.rstrip('/') for n in gfile.listdir(export_dir)}
                      - set(EXPORT_ENTRIES))
      if others:
        raise ExportError(f'{export_dir} exists and is not a SavedModel '
                          f'export (it holds {", ".join(others[:3])}); '
                          'choose another export dir')
    for leftover in (temporary, aside):
      if gfile.exists(leftover):
        gfile.rmtree(leftover)
    gfile.makedirs(temporary)
  except (tf.errors.OpError, OSError) as e:
    raise ExportError(f'cannot write export dir {export_dir}: '
                      f'{_first_line(e)}') from None
  return temporary


def _swap_in(temporary: str, export_dir: str) -> None:
  """Replaces `export_dir` by the complete export in `temporary`.

  Renames the earlier export aside, the new one in, then deletes the earlier
  one. A kill between the two renames leaves the earlier export aside, where
  the next `_fresh_dir` restores it.
  """
  gfile = tf.io.gfile
  aside = _sibling(export_dir, ASIDE_SUFFIX)
  replacing = gfile.exists(export_dir)
  if replacing:
    gfile.rename(export_dir, aside)
  try:
    gfile.rename(temporary, export_dir)
  except BaseException:  # Put the earlier export back, whatever happened.
    if replacing:
      gfile.rename(aside, export_dir)
    raise
  if replacing:
    gfile.rmtree(aside)


def _normalisation(config) -> Tuple[Optional[List[float]],
                                    Optional[List[float]]]:
  try:
    info = data.get_info(config.dataset, config.data_dir)
  except (ValueError, OSError):  # E.g. TFDS metadata not readable here.
    return None, None
  return list(info.mean), list(info.std)


def _restore(session: tf1.Session, checkpoint: str) -> int:
  """Restores the network's variables; returns the checkpoint's step."""
  step = tf1.train.get_or_create_global_step()
  saver = tf1.train.Saver(tf1.global_variables())
  try:
    saver.restore(session, checkpoint)
  # ValueError: a path that is no checkpoint at all.
  except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
          ValueError) as e:
    missing = model_dir_lib.missing_variable_error(
        e, checkpoint, advice='export it with that version')
    if missing is not None:
      raise ExportError(str(missing)) from None
    raise ExportError(f'cannot restore {checkpoint}: {_first_line(e)}'
                      ) from None
  return int(session.run(step))


def _write_tflite_and_info(temporary: str, result: ExportResult) -> None:
  """Converts the SavedModel in `temporary`; writes export_info.json last.

  Called outside any graph context: inside one the converter would take
  its TF1 path (eager is off there) and convert differently.
  """
  if result.tflite_path:
    model = tflite_lib.saved_model_to_tflite(
        os.path.join(temporary, SAVED_MODEL_DIRNAME))
    with tf.io.gfile.GFile(os.path.join(temporary, TFLITE_FILENAME),
                           'wb') as f:
      f.write(model)
  # Last: an export dir holding export_info.json is complete.
  with tf.io.gfile.GFile(os.path.join(temporary, INFO_FILENAME), 'w') as f:
    f.write(json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True))


def export_run(model_dir: str, export_dir: Optional[str] = None,
               checkpoint: Optional[str] = None,
               tflite: bool = True) -> ExportResult:
  """Exports a train_eval run's checkpoint as a SavedModel and TFLite model.

  Atomic: everything is written to a temporary dir next to `export_dir` and
  renamed into place once complete, so a failure, bad input or a kill
  leaves the earlier export as it was (see `_fresh_dir`, `_swap_in`).

  Args:
    model_dir: the train_eval model dir (with config.json, model_spec.json).
    export_dir: where to write; default `<model_dir>/export`. An earlier
      export there is replaced; a dir holding anything else is refused.
    checkpoint: a checkpoint prefix; default the latest in model_dir.
    tflite: also write the float TFLite model.

  Returns:
    What was written.

  Raises:
    ExportError: no run or checkpoint, a checkpoint without the network's
      variables, or an export dir that cannot be written or replaced.
    ExportFailedError: writing failed part-way (the earlier export is
      unchanged).
  """
  try:
    config, spec = train_eval.load_run(model_dir)
  except ValueError as e:
    raise ExportError(str(e)) from None
  if checkpoint:
    # Checked before anything is built or written, as bin/export_model.py's
    # --checkpoint is (an unfinished save is no checkpoint): names the
    # choices.
    try:
      checkpoint = model_dir_lib.find_checkpoint(model_dir, checkpoint,
                                                 flag=None)
    except model_dir_lib.ModelDirError as e:
      raise ExportError(str(e)) from None
  # The state file names only checkpoints whose save finished.
  checkpoint = checkpoint or tf.train.latest_checkpoint(model_dir)
  if not checkpoint:
    raise ExportError(f'{model_dir} has no checkpoint to export; train first')
  export_dir = export_dir or os.path.join(model_dir, 'export')
  masked = architecture.with_indices(spec, architecture.parse_indices(
      config.indices, spec))
  graph, *tensors = tflite_lib.inference_graph(
      masked, config.image_size, config.input_channels, config.num_classes)
  mean, std = _normalisation(config)
  temporary = _fresh_dir(export_dir)
  try:
    with graph.as_default(), tf1.Session(graph=graph) as session:
      global_step = _restore(session, checkpoint)
      tflite_lib.write_saved_model(
          session, os.path.join(temporary, SAVED_MODEL_DIRNAME), *tensors)
    result = ExportResult(
        export_dir=export_dir,
        saved_model_dir=os.path.join(export_dir, SAVED_MODEL_DIRNAME),
        tflite_path=(os.path.join(export_dir, TFLITE_FILENAME) if tflite
                     else None),
        checkpoint=checkpoint, global_step=global_step,
        search_space=config.search_space, architecture=config.indices,
        input_shape=[-1, config.image_size, config.image_size,
                     config.input_channels], mean=mean, std=std)
    _write_tflite_and_info(temporary, result)
    _swap_in(temporary, export_dir)
  except (tf.errors.OpError, OSError) as e:
    raise ExportFailedError(f'exporting to {export_dir} failed: '
                            f'{_first_line(e)}') from e
  finally:
    if tf.io.gfile.exists(temporary):
      tf.io.gfile.rmtree(temporary)
  return result


