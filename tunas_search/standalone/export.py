"""Exports a trained stand-alone network: SavedModel, TFLite models, accuracy.

The SavedModel's `serving_default` signature takes `images`: float32
[N, S, S, C] already preprocessed and normalised as the input pipeline does
it (`tunas_search.data.preprocessing`: resize or centre crop to S, then
`(x / 255 - mean) / std` per channel with the dataset's mean and std, which
`export_info.json` records), and returns `logits` and `probabilities`
(float32 [N, num_classes]). The inference graph is built with
`is_training=False` (BN uses its moving averages, no dropout) in float32,
whatever precision the model was trained in.

Beside it: the float TFLite model (`model.tflite`), optionally a
post-training quantized one (`model_<precision>.tflite`, `ExportOptions`;
int8 takes its activation ranges from images of the run's training split),
the quantization parameters of every model's input and output tensors, and
every model's top-1/top-5 on the run's evaluation split, image by image
(`predictions.json`, `standalone/accuracy.py`).
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from tunas_search import data
from tunas_search.config.export import ExportOptions
from tunas_search.config.export import PRECISIONS
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.runtime import tflite as tflite_lib
from tunas_search.space import architecture
from tunas_search.standalone import accuracy as accuracy_lib
from tunas_search.standalone import train_eval

tf1 = tf.compat.v1
SAVED_MODEL_DIRNAME = 'saved_model'
TFLITE_FILENAME = 'model.tflite'
INFO_FILENAME = 'export_info.json'
PREDICTIONS_FILENAME = 'predictions.json'
FLOAT = PRECISIONS['none']


def quantized_filename(quantize: str) -> str:
  """`model_<precision>.tflite`, e.g. model_int8.tflite."""
  return f'model_{PRECISIONS[quantize]}.tflite'


# Everything an export dir holds; a dir holding anything else is not ours.
EXPORT_ENTRIES = (SAVED_MODEL_DIRNAME, TFLITE_FILENAME, INFO_FILENAME,
                  PREDICTIONS_FILENAME) + tuple(
                      quantized_filename(q) for q in PRECISIONS if q != 'none')
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
    quantize: the quantization mode of `quantized_tflite_path`
      (`config.export.QUANTIZE_MODES`; 'none': no quantized model).
    quantized_tflite_path: the quantized TFLite model, or None.
    tensors: precision ('float32', 'int8', ...) -> the quantization
      parameters of that TFLite model's input and output tensors:
      {'inputs': {'images': q}, 'outputs': {'logits': q, 'probabilities':
      q}}, each q {'dtype', 'scale', 'zero_point'} (scale 0 for float).
      A float32 input takes `(x / 255 - mean) / std`; an int8 input takes
      that, divided by scale, rounded, plus zero_point.
    calibration: int8: {'split', 'images', 'seed'} of the representative
      images; else None.
    accuracy: `accuracy.summarize` of every TFLite model on the run's
      evaluation split plus 'split', or None when not evaluated.
    predictions_path: every image's label and ranked classes, or None.
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
  quantize: str = 'none'
  quantized_tflite_path: Optional[str] = None
  tensors: Dict[str, Any] = dataclasses.field(default_factory=dict)
  calibration: Optional[Dict[str, Any]] = None
  accuracy: Optional[Dict[str, Any]] = None
  predictions_path: Optional[str] = None


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


def _check_data(config, options: ExportOptions) -> Optional[str]:
  """Checks the splits the export reads; returns the data dir to read.

  Raises:
    ExportError: one line naming the dataset and what is missing.
  """
  data_dir = options.data_dir or config.data_dir
  splits = []
  if options.tflite and options.evaluate:
    splits.append(config.eval_split)
  if options.quantize == 'int8':
    splits.append(config.train_split)
  if not splits:
    return data_dir
  try:
    data.check_available(config.dataset, data_dir)
    data.check_splits(config.dataset, data_dir, splits)
  except ValueError as e:  # DataError, or an unknown dataset's name.
    needs = ' and '.join(
        (['evaluating (--noevaluate skips it)'] if options.evaluate else [])
        + (['int8 calibration'] if options.quantize == 'int8' else []))
    raise ExportError(f'the run\'s data is not readable here, and '
                      f'{needs} reads it: {_first_line(e)}; give its '
                      'location with --data_dir') from None
  return data_dir


def _representative(config, data_dir: Optional[str], options: ExportOptions
                    ) -> List[np.ndarray]:
  """The int8 calibration images: float32 [1, S, S, C] each, seeded."""
  input_fn = data.ClassifierInputFn(config.dataset, data_dir,
                                    config.train_split, config.image_size,
                                    is_training=False)
  sample = input_fn.sample(options.calibration_images,
                           options.calibration_seed)
  return [image[np.newaxis] for image, _ in sample.as_numpy_iterator()]


def _write_tflite_models(temporary: str, config, data_dir: Optional[str],
                         options: ExportOptions
                         ) -> Tuple[Dict[str, bytes], Optional[Dict]]:
  """Converts the SavedModel in `temporary` to every TFLite model asked for.

  Called outside any graph context: inside one the converter would take
  its TF1 path (eager is off there) and convert differently.

  Returns:
    (precision -> flatbuffer, the int8 calibration's description or None).
  """
  saved_model = os.path.join(temporary, SAVED_MODEL_DIRNAME)
  models, calibration = {}, None
  if not options.tflite:
    return models, calibration
  models[FLOAT] = tflite_lib.saved_model_to_tflite(saved_model)
  if options.quantize != 'none':
    representative = None
    if options.quantize == 'int8':
      images = _representative(config, data_dir, options)
      calibration = {'split': config.train_split, 'images': len(images),
                     'seed': options.calibration_seed}
      representative = lambda: images
    try:
      models[options.precision] = tflite_lib.saved_model_to_tflite(
          saved_model, options.quantize, representative, options.int8_io)
    # The converter raises its own ConverterError, from a private module
    # (docs/DESIGN.md, "TensorFlow internals"): any failure here is the
    # quantized conversion's.
    except Exception as e:  # pylint: disable=broad-except
      raise ExportFailedError(f'the {options.quantize} TFLite conversion '
                              f'failed: {_first_line(e)}') from e
  for precision, model in models.items():
    name = (TFLITE_FILENAME if precision == FLOAT
            else quantized_filename(options.quantize))
    with tf.io.gfile.GFile(os.path.join(temporary, name), 'wb') as f:
      f.write(model)
  return models, calibration


def _evaluate(models: Dict[str, bytes], config, data_dir: Optional[str],
              temporary: str) -> Dict[str, Any]:
  """Every model's accuracy on the run's evaluation split; writes
  predictions.json into `temporary`."""
  input_fn = data.ClassifierInputFn(config.dataset, data_dir,
                                    config.eval_split, config.image_size,
                                    is_training=False, drop_remainder=False)
  examples = ((images[0], labels[0]) for images, labels
              in input_fn({'batch_size': 1}).as_numpy_iterator())
  predictions = accuracy_lib.predict(
      models, examples, input_fn.info.num_examples(config.eval_split))
  with tf.io.gfile.GFile(os.path.join(temporary, PREDICTIONS_FILENAME),
                         'w') as f:
    f.write(json.dumps(accuracy_lib.to_json_values(predictions,
                                                   config.eval_split)))
  return dict(accuracy_lib.summarize(predictions, FLOAT),
              split=config.eval_split)


def _write_info(temporary: str, result: ExportResult) -> None:
  """Writes export_info.json: last, so an export dir holding it is
  complete."""
  with tf.io.gfile.GFile(os.path.join(temporary, INFO_FILENAME), 'w') as f:
    f.write(json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True))


def export_run(model_dir: str, export_dir: Optional[str] = None,
               checkpoint: Optional[str] = None,
               options: ExportOptions = ExportOptions()) -> ExportResult:
  """Exports a train_eval run's checkpoint as a SavedModel and TFLite models.

  Atomic: everything is written to a temporary dir next to `export_dir` and
  renamed into place once complete (the models evaluated), so a failure,
  bad input or a kill leaves the earlier export as it was (see
  `_fresh_dir`, `_swap_in`).

  Args:
    model_dir: the train_eval model dir (with config.json, model_spec.json).
    export_dir: where to write; default `<model_dir>/export`. An earlier
      export there is replaced; a dir holding anything else is refused.
    checkpoint: a checkpoint prefix; default the latest in model_dir.
    options: which TFLite models to write and how to check them.

  Returns:
    What was written.

  Raises:
    ExportError: no run or checkpoint, a checkpoint without the network's
      variables, data the export needs that cannot be read, or an export
      dir that cannot be written or replaced (nothing written).
    ExportFailedError: writing or converting failed part-way (the earlier
      export is unchanged).
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
  data_dir = _check_data(config, options)
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
    models, calibration = _write_tflite_models(temporary, config, data_dir,
                                               options)
    quantized = options.quantize != 'none'
    result = ExportResult(
        export_dir=export_dir,
        saved_model_dir=os.path.join(export_dir, SAVED_MODEL_DIRNAME),
        tflite_path=(os.path.join(export_dir, TFLITE_FILENAME)
                     if options.tflite else None),
        checkpoint=checkpoint, global_step=global_step,
        search_space=config.search_space, architecture=config.indices,
        input_shape=[-1, config.image_size, config.image_size,
                     config.input_channels], mean=mean, std=std,
        quantize=options.quantize,
        quantized_tflite_path=(
            os.path.join(export_dir, quantized_filename(options.quantize))
            if quantized else None),
        tensors={precision: tflite_lib.edge_quantization(model)
                 for precision, model in models.items()},
        calibration=calibration)
    if models and options.evaluate:
      result = dataclasses.replace(
          result, accuracy=_evaluate(models, config, data_dir, temporary),
          predictions_path=os.path.join(export_dir, PREDICTIONS_FILENAME))
    _write_info(temporary, result)
    _swap_in(temporary, export_dir)
  except (tf.errors.OpError, OSError) as e:
    raise ExportFailedError(f'exporting to {export_dir} failed: '
                            f'{_first_line(e)}') from e
  finally:
    if tf.io.gfile.exists(temporary):
      tf.io.gfile.rmtree(temporary)
  return result


def accuracy_warning(result: ExportResult, max_top1_drop: float
                     ) -> Optional[str]:
  """One line when the quantized model lost over `max_top1_drop` top-1
  points (None when it did not, or nothing was evaluated)."""
  if not result.accuracy or result.quantize == 'none':
    return None
  precision = PRECISIONS[result.quantize]
  mine, base = result.accuracy[precision], result.accuracy[FLOAT]
  if mine['top1_drop_points'] <= max_top1_drop:
    return None
  return (f'the {precision} model\'s top-1 is {100 * mine["top1"]:.2f}%, '
          f'{mine["top1_drop_points"]:.2f} points below the float model\'s '
          f'{100 * base["top1"]:.2f}% (over --max_top1_drop='
          f'{max_top1_drop:g}; top-1 agreement '
          f'{100 * mine["top1_agreement"]:.2f}%, on '
          f'{result.accuracy["images"]} {result.accuracy["split"]} images)')
