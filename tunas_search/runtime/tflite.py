"""A stand-alone network as a TFLite model, run and timed on this CPU.

The network's inference graph (`is_training=False`, float32) and its
SavedModel serving signature (`serving_default`: `images` in, `logits` and
`probabilities` out), the TFLite conversion of that signature (float, or
post-training quantized: `QUANTIZE_MODES`), and the TFLite interpreter:
running a model on a batch and timing `invoke()`. The export of a trained
network (standalone/export.py) and the latency calibration
(cost_models/calibration.py, on random weights) both go through here, so a
measured model is an exported one.
"""

import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional,
                    Tuple)

from absl import logging
import numpy as np
import tensorflow as tf

from tunas_search import supernet
from tunas_search.config import export as export_config

tf1 = tf.compat.v1

SIGNATURE_KEY = 'serving_default'
INPUT_KEY = 'images'
# A SavedModel's directory name inside a temporary directory.
_SAVED_MODEL_DIRNAME = 'saved_model'
# Post-training quantization: see tunas_search/config/export.py.
QUANTIZE_MODES = export_config.QUANTIZE_MODES
PRECISIONS = export_config.PRECISIONS
# Random inputs that set the activation ranges of an int8 model with random
# weights (latency only: the ranges' values hardly change the time).
RANDOM_CALIBRATION_IMAGES = 8


check_quantize = export_config.check_quantize


def inference_graph(masked_spec: Any, image_size: int, input_channels: int,
                    num_classes: int, batch_size: Optional[int] = None,
                    seed: Optional[int] = None
                    ) -> Tuple[tf.Graph, tf.Tensor, tf.Tensor, tf.Tensor]:
  """Builds a float32 inference network in a new graph.

  Args:
    masked_spec: a spec with numpy one-hot masks (a stand-alone network).
    image_size: input side S.
    input_channels: input channels C.
    num_classes: classifier outputs.
    batch_size: static batch size, or None for any.
    seed: graph-level seed of the variables' initialisers (set before they
      are built, so it takes effect).

  Returns:
    (graph, images placeholder [batch_size, S, S, C], logits, probabilities).
  """
  graph = tf.Graph()
  with graph.as_default():
    if seed is not None:
      tf1.set_random_seed(seed)
    images = tf1.placeholder(tf.float32, [batch_size, image_size, image_size,
                                          input_channels], name=INPUT_KEY)
    logits = supernet.build_network(
        masked_spec, images, num_classes,
        supernet.forms.standalone(is_training=False), dtype=tf.float32)
    logits = tf.identity(logits, name='logits')
    probabilities = tf.nn.softmax(logits, name='probabilities')
  return graph, images, logits, probabilities


def write_saved_model(session: tf1.Session, path: str, images: tf.Tensor,
                       logits: tf.Tensor, probabilities: tf.Tensor) -> None:
  signature = tf1.saved_model.predict_signature_def(
      inputs={INPUT_KEY: images},
      outputs={'logits': logits, 'probabilities': probabilities})
  builder = tf1.saved_model.Builder(path)
  builder.add_meta_graph_and_variables(
      session, [tf1.saved_model.tag_constants.SERVING],
      signature_def_map={SIGNATURE_KEY: signature}, strip_default_attrs=True)
  builder.save()


@contextlib.contextmanager
def _native_stderr_to_debug_log() -> Iterator[None]:
  """Moves what is written to file descriptor 2 meanwhile to the debug log.

  The TFLite converter prints a summary of its passes (a dozen lines) from
  C++ straight to the process's stderr, past both Python's `sys.stderr` and
  TF_CPP_MIN_LOG_LEVEL. Not thread-safe: other threads' stderr output
  meanwhile is moved too.
  """
  sys.stderr.flush()
  try:
    saved = os.dup(2)
  except OSError:  # No stderr to redirect.
    yield
    return
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = captured.read().decode('utf-8', 'replace').strip()
      if text:
        logging.debug('TFLite converter output:\n%s', text)


def saved_model_to_tflite(
    saved_model_dir: str, quantize: str = 'none',
    representative: Optional[Callable[[], Iterable[np.ndarray]]] = None,
    int8_io: bool = False) -> bytes:
  """Converts a SavedModel's serving signature to a TFLite model.

  The converter's own printout goes to the debug log (absl --verbosity=1).

  Args:
    saved_model_dir: a SavedModel written by `write_saved_model`.
    quantize: one of QUANTIZE_MODES ('none': float32).
    representative: int8 only: returns an iterable of float32 images
      [1, S, S, C], normalised as the serving signature expects; the
      converter runs the float model on them to fix each activation's range.
    int8_io: int8 only: int8 input and output tensors (else float32, with
      (de)quantize operations at the edges).

  Returns:
    The TFLite flatbuffer.

  Raises:
    ValueError: for an unknown mode, int8 without `representative`, or
      `int8_io` without int8.
  """
  check_quantize(quantize)
  if (quantize == 'int8') != (representative is not None):
    raise ValueError('a representative dataset is needed by, and only by, '
                     f'quantize=int8 (got quantize={quantize})')
  if int8_io and quantize != 'int8':
    raise ValueError(f'int8 input/output needs quantize=int8, got {quantize}')
  converter = tf.lite.TFLiteConverter.from_saved_model(
      saved_model_dir, signature_keys=[SIGNATURE_KEY])
  if quantize != 'none':
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  if quantize == 'float16':
    converter.target_spec.supported_types = [tf.float16]
  if quantize == 'int8':
    converter.representative_dataset = lambda: (
        [np.asarray(image, np.float32)] for image in representative())
    # Full integer: a conversion that would leave any operation in float
    # fails instead of silently shipping a mixed model.
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if int8_io:
      converter.inference_input_type = tf.int8
      converter.inference_output_type = tf.int8
  with _native_stderr_to_debug_log():
    return converter.convert()


def random_images(shape: List[int], count: int, seed: int
                  ) -> Callable[[], Iterator[np.ndarray]]:
  """A representative dataset of `count` seeded standard-normal images."""
  def images():
    rng = np.random.default_rng(seed)
    for _ in range(count):
      yield rng.standard_normal(shape).astype(np.float32)
  return images


def random_tflite_model(masked_spec: Any, image_size: int,
                        input_channels: int, num_classes: int,
                        seed: int = 0, quantize: str = 'none') -> bytes:
  """A TFLite model of a stand-alone network with random weights.

  For latency measurements, where the weights' values do not matter. Goes
  through a temporary SavedModel, the path `export_run` takes, so the
  measured model is the exported one: float32 by default, or quantized
  (`QUANTIZE_MODES`); an int8 model takes its activation ranges from
  RANDOM_CALIBRATION_IMAGES seeded random images and has float32 input and
  output, as an int8 export does by default.
  """
  check_quantize(quantize)
  graph, images, logits, probabilities = inference_graph(
      masked_spec, image_size, input_channels, num_classes, batch_size=1,
      seed=seed)
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, _SAVED_MODEL_DIRNAME)
    with graph.as_default():
      init = tf1.global_variables_initializer()
      with tf1.Session(graph=graph) as session:
        session.run(init)
        write_saved_model(session, path, images, logits, probabilities)
    if quantize == 'none':
      return saved_model_to_tflite(path)
    representative = None
    if quantize == 'int8':
      representative = random_images(
          [1, image_size, image_size, input_channels],
          RANDOM_CALIBRATION_IMAGES, seed)
    return saved_model_to_tflite(path, quantize, representative)


def quantization_of(detail: Dict[str, Any]) -> Dict[str, Any]:
  """An interpreter tensor's dtype, scale and zero point (0 and 0: float)."""
  scale, zero_point = detail['quantization']
  return {'dtype': np.dtype(detail['dtype']).name, 'scale': float(scale),
          'zero_point': int(zero_point)}


def edge_quantization(model_content: bytes) -> Dict[str, Dict[str, Any]]:
  """The quantization parameters of a model's signature inputs and outputs.

  Returns:
    {'inputs': {name: quantization_of(...)}, 'outputs': {...}}, names as in
    the serving signature ('images'; 'logits', 'probabilities').
  """
  runner = tf.lite.Interpreter(model_content=model_content
                               ).get_signature_runner(SIGNATURE_KEY)
  return {'inputs': {name: quantization_of(detail) for name, detail
                     in runner.get_input_details().items()},
          'outputs': {name: quantization_of(detail) for name, detail
                      in runner.get_output_details().items()}}


def quantize_values(values: np.ndarray, detail: Dict[str, Any]
                    ) -> np.ndarray:
  """Float values as an int8 tensor's integers (float tensors: as float32).

  q = round(x / scale) + zero_point, saturated to [-128, 127] (TFLite's
  affine quantization).
  """
  if np.dtype(detail['dtype']) != np.int8:
    return values.astype(np.float32)
  scale, zero_point = detail['quantization']
  q = np.round(values.astype(np.float64) / scale) + zero_point
  return np.clip(q, -128, 127).astype(np.int8)


def dequantize_values(values: np.ndarray, detail: Dict[str, Any]
                      ) -> np.ndarray:
  """An int8 tensor's integers as float32 (float tensors unchanged)."""
  if np.dtype(detail['dtype']) != np.int8:
    return values
  scale, zero_point = detail['quantization']
  return ((values.astype(np.float32) - zero_point) * scale).astype(np.float32)


def run_tflite(model_content: bytes, images: np.ndarray,
               num_threads: int = 1) -> Dict[str, np.ndarray]:
  """Runs an exported TFLite model's serving signature on a batch.

  Args:
    model_content: a model written by `export_run`.
    images: float32 [N, S, S, C], normalised as the export expects.
    num_threads: interpreter threads.

  Returns:
    The signature's outputs by name ('logits', 'probabilities'), each
    float32 [N, num_classes] (an int8 model's int8 outputs dequantized).
  """
  interpreter = tf.lite.Interpreter(model_content=model_content,
                                    num_threads=num_threads)
  return signature_runner(interpreter)(images)


def signature_runner(interpreter: tf.lite.Interpreter
                     ) -> Callable[[np.ndarray], Dict[str, np.ndarray]]:
  """`run(images float32 [N, S, S, C]) -> {output name: float32 [N, K]}`.

  Quantizes the images for an int8 input tensor and dequantizes int8
  outputs, so that every model of an export is run alike.
  """
  runner = interpreter.get_signature_runner(SIGNATURE_KEY)
  inputs = runner.get_input_details()
  outputs = runner.get_output_details()

  def run(images: np.ndarray) -> Dict[str, np.ndarray]:
    # The runner resizes the batch dimension to fit `images`.
    results = runner(**{INPUT_KEY: quantize_values(images,
                                                   inputs[INPUT_KEY])})
    return {name: dequantize_values(value, outputs[name])
            for name, value in results.items()}
  return run


@dataclasses.dataclass(frozen=True)
class Latency:
  """TFLite latency on this machine's CPU, in milliseconds."""
  median_ms: float
  min_ms: float
  runs: int
  num_threads: int


def tflite_timer(model_content: bytes, num_threads: int = 1, seed: int = 0
                 ) -> Callable[[int, int], Latency]:
  """A loaded TFLite model that times `invoke()` on one random input.

  Args:
    model_content: the TFLite flatbuffer.
    num_threads: interpreter threads (1, as phone benchmarks use).
    seed: seed of the random input.

  Returns:
    `time_runs(runs, warmup_runs) -> Latency`: untimed runs first
    (allocation, caches), then the median and minimum of `runs` timed runs.
    It can be called again: a retake reuses the loaded model.
  """
  interpreter = tf.lite.Interpreter(model_content=model_content,
                                    num_threads=num_threads)
  interpreter.allocate_tensors()
  detail = interpreter.get_input_details()[0]
  rng = np.random.default_rng(seed)
  interpreter.set_tensor(detail['index'], quantize_values(
      rng.standard_normal(detail['shape']), detail))

  def time_runs(runs: int, warmup_runs: int) -> Latency:
    if runs < 1 or warmup_runs < 0:
      raise ValueError(f'need runs >= 1 and warmup_runs >= 0, got {runs}, '
                       f'{warmup_runs}')
    for _ in range(warmup_runs):
      interpreter.invoke()
    times = []
    for _ in range(runs):
      began = time.perf_counter()
      interpreter.invoke()
      times.append(1000.0 * (time.perf_counter() - began))
    return Latency(statistics.median(times), min(times), runs, num_threads)
  return time_runs


def measure_tflite_latency(model_content: bytes, runs: int = 20,
                           warmup_runs: int = 3, num_threads: int = 1,
                           seed: int = 0) -> Latency:
  """Times `invoke()` of a TFLite model on one random input (`tflite_timer`).

  Returns:
    The median and minimum latency over `runs` (the median is robust to
    other load; the minimum to more of it).
  """
  if runs < 1 or warmup_runs < 0:
    raise ValueError(f'need runs >= 1 and warmup_runs >= 0, got {runs}, '
                     f'{warmup_runs}')
  return tflite_timer(model_content, num_threads, seed)(runs, warmup_runs)
