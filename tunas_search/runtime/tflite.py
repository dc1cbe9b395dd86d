"""A stand-alone network as a float TFLite model, run and timed on this CPU.

The network's inference graph (`is_training=False`, float32) and its
SavedModel serving signature (`serving_default`: `images` in, `logits` and
`probabilities` out), the TFLite conversion of that signature, and the
TFLite interpreter: running a model on a batch and timing `invoke()`. The
export of a trained network (standalone/export.py) and the latency
calibration (cost_models/calibration.py, on random weights) both go through
here, so a measured model is an exported one.
"""

import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from tunas_search import supernet

tf1 = tf.compat.v1

SIGNATURE_KEY = 'serving_default'
INPUT_KEY = 'images'
# A SavedModel's directory name inside a temporary directory.
_SAVED_MODEL_DIRNAME = 'saved_model'


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


def saved_model_to_tflite(saved_model_dir: str) -> bytes:
  """Converts a SavedModel's serving signature to a float TFLite model.

  The converter's own printout goes to the debug log (absl --verbosity=1).
  """
  converter = tf.lite.TFLiteConverter.from_saved_model(
      saved_model_dir, signature_keys=[SIGNATURE_KEY])
  with _native_stderr_to_debug_log():
    return converter.convert()


def random_tflite_model(masked_spec: Any, image_size: int,
                        input_channels: int, num_classes: int,
                        seed: int = 0) -> bytes:
  """A float TFLite model of a stand-alone network with random weights.

  For latency measurements, where the weights' values do not matter. Goes
  through a temporary SavedModel, the path `export_run` takes, so the
  measured model is the exported one.
  """
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
    return saved_model_to_tflite(path)


def run_tflite(model_content: bytes, images: np.ndarray,
               num_threads: int = 1) -> Dict[str, np.ndarray]:
  """Runs an exported TFLite model's serving signature on a batch.

  Args:
    model_content: a model written by `export_run`.
    images: float32 [N, S, S, C], normalised as the export expects.
    num_threads: interpreter threads.

  Returns:
    The signature's outputs by name ('logits', 'probabilities'), each
    float32 [N, num_classes].
  """
  interpreter = tf.lite.Interpreter(model_content=model_content,
                                    num_threads=num_threads)
  runner = interpreter.get_signature_runner(SIGNATURE_KEY)
  # The runner resizes the batch dimension to fit `images`.
  return runner(**{INPUT_KEY: images.astype(np.float32)})


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
  interpreter.set_tensor(detail['index'], rng.standard_normal(
      detail['shape']).astype(np.float32))

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
