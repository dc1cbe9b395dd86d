"""An export predicts what the trained model predicts, image by image.

A tiny architecture is trained for a few steps (so its BN moving averages
have moved), exported, and the SavedModel's and TFLite model's logits for
each test image, fed alone (batch size 1), are compared with the trained
model's own inference: the stand-alone model_fn in PREDICT mode, BN on its
moving averages, restored from the same checkpoint. An export graph built
in training mode (BN on the statistics of the batch, here of one image)
fails this test.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.standalone import test_train_eval
from tunas_search import data
from tunas_search.runtime import tflite
from tunas_search.standalone import export
from tunas_search.standalone import train_eval
from tunas_search.standalone import model_fn as model_fn_lib

tf1 = tf.compat.v1
NUM_IMAGES = 6
# Float32 logits of a few layers: the SavedModel runs TF's kernels after
# grappler (BN folded, sums reordered); TFLite its own (XNNPACK). Both
# differ from the model_fn's by float32 rounding only, far below the
# difference training-mode BN makes (about 0.6 here).
SAVED_MODEL_TOLERANCE = 1e-4
TFLITE_TOLERANCE = 1e-3


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """(config, export result, test images) of a tiny run trained 8 steps."""
  model_dir = tmp_path_factory.mktemp('export') / 'run'
  config = test_train_eval.make_config(model_dir, mode='train', max_steps=8,
                                       save_checkpoints_steps=8)
  train_eval.run(config, test_train_eval.SPEC)
  result = export.export_run(str(model_dir))
  input_fn = data.ClassifierInputFn(config.dataset, None, 'test',
                                    config.image_size, is_training=False)
  images, _ = next(iter(input_fn({'batch_size': NUM_IMAGES})))
  return config, result, images.numpy()


def _model_fn_logits(config, checkpoint, images):
  """The trained model's own inference: model_fn in PREDICT mode."""
  with tf.Graph().as_default():
    spec = model_fn_lib.make_model_fn(config, test_train_eval.SPEC)(
        tf.constant(images), None, tf.estimator.ModeKeys.PREDICT, {})
    with tf1.Session() as session:
      tf1.train.Saver().restore(session, checkpoint)
      return session.run(spec.predictions['logits'])


def _scale(logits):
  return max(1.0, float(np.abs(logits).max()))


def test_exported_models_predict_as_the_trained_model(trained):
  config, result, images = trained
  assert result.global_step == 8
  expected = _model_fn_logits(config, result.checkpoint, images)
  serve = tf.saved_model.load(result.saved_model_dir).signatures[
      tflite.SIGNATURE_KEY]
  with open(result.tflite_path, 'rb') as f:
    lite = f.read()
  for image, want in zip(images, expected):
    one = image[np.newaxis]  # Batch size 1: no other image to lean on.
    served = serve(images=tf.constant(one))['logits'].numpy()[0]
    np.testing.assert_allclose(served, want, rtol=0,
                               atol=SAVED_MODEL_TOLERANCE * _scale(want))
    on_lite = tflite.run_tflite(lite, one)['logits'][0]
    np.testing.assert_allclose(on_lite, want, rtol=0,
                               atol=TFLITE_TOLERANCE * _scale(want))
  # The images differ enough for this to compare predictions, not a
  # constant: the expected logits are no copy of one another.
  assert np.ptp(expected, axis=0).max() > 10 * TFLITE_TOLERANCE * _scale(
      expected)
