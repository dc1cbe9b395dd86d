"""Top-1/top-5 and agreement of TFLite models, on hand-computed cases."""

import numpy as np
import pytest

from tests.e2e import tiny
from tunas_search.runtime import tflite
from tunas_search.space import architecture
from tunas_search.standalone import accuracy


def test_ranked_classes_break_ties_to_the_lower_class():
  # Quantized logits tie often: the lower class index ranks first.
  logits = np.array([[0.5, 2.0, 2.0, -1.0, 2.0, 0.0],
                     [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
  np.testing.assert_array_equal(accuracy.ranked_classes(logits),
                                [[1, 2, 4, 0, 5], [0, 1, 2, 3, 4]])
  # Fewer classes than 5: all of them.
  assert accuracy.ranked_classes(np.array([[0.0, 3.0]])).tolist() == [[1, 0]]


def test_summarize_by_hand():
  labels = np.array([0, 1, 2, 3])
  top_k = {
      # Top-1 right on images 0 and 1; image 2's label third; image 3's
      # label not in its top 5.
      'float32': np.array([[0, 5, 6, 7, 8], [1, 0, 5, 6, 7],
                           [5, 6, 2, 7, 8], [4, 5, 6, 7, 8]]),
      # Same top-1 as float on images 0 and 2; right on image 0 only.
      'int8': np.array([[0, 5, 6, 7, 8], [9, 1, 5, 6, 7],
                        [5, 6, 7, 8, 9], [3, 5, 6, 7, 8]]),
  }
  summary = accuracy.summarize(accuracy.Predictions(labels, top_k),
                               'float32')
  assert summary['images'] == 4 and summary['top_k'] == 5
  assert summary['float32'] == {'top1': 0.5, 'top5': 0.75}
  # int8: top-1 right on images 0 and 3 (0.5); top-5 on 0, 1 and 3.
  assert summary['int8'] == {'top1': 0.5, 'top5': 0.75,
                             'top1_agreement': 0.5,
                             'top1_drop_points': 0.0}


def test_predict_runs_every_model_on_every_image():
  spec = tiny.tiny_spec()
  masked = architecture.with_indices(spec, architecture.largest(spec))
  model = tflite.random_tflite_model(masked, 28, 1, 10)
  rng = np.random.default_rng(0)
  images = rng.standard_normal([3, 28, 28, 1]).astype(np.float32)
  labels = [4, 1, 7]
  predictions = accuracy.predict({'a': model, 'b': model},
                                 zip(images, labels), total=3)
  assert predictions.labels.tolist() == labels
  expected = accuracy.ranked_classes(tflite.run_tflite(model, images)[
      'logits'])
  # Batch 1 and batch 3 run the same float32 kernels per image.
  for name in 'ab':
    np.testing.assert_array_equal(predictions.top_k[name], expected)
  summary = accuracy.summarize(predictions, 'a')
  assert summary['b']['top1_agreement'] == 1.0
  assert summary['b']['top1_drop_points'] == pytest.approx(0.0, abs=0)
  values = accuracy.to_json_values(predictions, 'test')
  assert values['labels'] == labels and values['split'] == 'test'
  assert values['top_k']['a'] == expected.tolist()
