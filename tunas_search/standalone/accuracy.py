"""Top-1/top-5 accuracy of an export's TFLite models, image by image.

Each model runs through the TFLite interpreter on one image at a time
(batch 1, one thread: as on a phone, and reproducible), in the split's
stored order; every model sees the same images. Classes are ranked by the
`logits` output, ties (common in an int8 model's quantized logits) broken
by the lower class index, so that a rerun, or anyone rerunning the models,
gets the same predictions image by image.
"""

import dataclasses
import time
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from tunas_search.runtime import progress
from tunas_search.runtime import tflite

TOP_K = 5
# Seconds between progress lines.
LOG_EVERY_S = 10.0


@dataclasses.dataclass(frozen=True)
class Predictions:
  """What every model predicted for every image.

  Attributes:
    labels: int64 [N], the images' labels.
    top_k: model name -> int64 [N, k], classes by descending logit
      (k = min(TOP_K, classes)).
  """
  labels: np.ndarray
  top_k: Dict[str, np.ndarray]


def ranked_classes(logits: np.ndarray, k: int = TOP_K) -> np.ndarray:
  """The k classes of largest logit, ties to the lower class index.

  Args:
    logits: float [N, K].
    k: how many (at most K).

  Returns:
    int64 [N, min(k, K)].
  """
  order = np.argsort(-logits, axis=-1, kind='stable')
  return order[:, :min(k, logits.shape[-1])].astype(np.int64)


def predict(models: Mapping[str, bytes],
            examples: Iterable[Tuple[np.ndarray, Any]],
            total: Optional[int] = None) -> Predictions:
  """Runs every model on every example, one image at a time.

  Args:
    models: name -> TFLite flatbuffer (`tflite.signature_runner` inputs).
    examples: (image float32 [S, S, C] normalised as the export expects,
      label) pairs.
    total: how many there are, for the progress lines' ETA (None: unknown).

  Returns:
    The Predictions.
  """
  runners = {}
  for name, content in models.items():
    interpreter = tf.lite.Interpreter(model_content=content, num_threads=1)
    runners[name] = tflite.signature_runner(interpreter)
  labels, ranked = [], {name: [] for name in models}
  logging.info('evaluating %s on %s images, one at a time',
               ', '.join(models), total if total else 'the')
  began = last = time.time()
  for image, label in examples:
    batch = np.asarray(image, np.float32)[np.newaxis]
    for name, run in runners.items():
      ranked[name].append(ranked_classes(run(batch)['logits'])[0])
    labels.append(int(label))
    now = time.time()
    if now - last >= LOG_EVERY_S:
      last = now
      rate = len(labels) / (now - began)
      eta = (f', ETA {progress.format_seconds((total - len(labels)) / rate)}'
             if total else '')
      logging.info('evaluated %d%s images with %d model(s) (%.0f images/s%s)',
                   len(labels), f'/{total}' if total else '', len(runners),
                   rate, eta)
  logging.info('evaluated %d images with %d model(s) in %s', len(labels),
               len(runners), progress.format_seconds(time.time() - began))
  k = min(TOP_K, *(r[0].shape[0] for r in ranked.values())) if labels else 1
  return Predictions(
      np.asarray(labels, np.int64),
      {name: (np.stack(r)[:, :k] if r else np.zeros([0, k], np.int64))
       for name, r in ranked.items()})


def summarize(predictions: Predictions, reference: str) -> Dict[str, Any]:
  """Accuracies, and every other model's agreement with `reference`.

  Returns:
    {'images': N, 'top_k': k, name: {'top1', 'top5' (fractions; 'top5' is
    top-k for fewer than 5 classes)}} and, for each model but `reference`,
    also 'top1_agreement' (the fraction of images where its top-1 class is
    the reference's) and 'top1_drop_points' (reference top-1 minus its own,
    in percentage points).
  """
  labels = predictions.labels
  count = len(labels)
  summary: Dict[str, Any] = {'images': count}
  for name, ranked in predictions.top_k.items():
    summary['top_k'] = int(ranked.shape[1])
    summary[name] = {
        'top1': float(np.mean(ranked[:, 0] == labels)) if count else 0.0,
        'top5': (float(np.mean(np.any(ranked == labels[:, np.newaxis],
                                      axis=1))) if count else 0.0)}
  base = predictions.top_k[reference]
  for name, ranked in predictions.top_k.items():
    if name != reference:
      summary[name]['top1_agreement'] = (
          float(np.mean(ranked[:, 0] == base[:, 0])) if count else 0.0)
      summary[name]['top1_drop_points'] = 100.0 * (
          summary[reference]['top1'] - summary[name]['top1'])
  return summary


def to_json_values(predictions: Predictions, split: str) -> Dict[str, Any]:
  """The predictions as JSON values: the split, labels and ranked classes."""
  return {'split': split, 'labels': predictions.labels.tolist(),
          'top_k': {name: ranked.tolist()
                    for name, ranked in predictions.top_k.items()}}
