"""Tests of tunas_search.standalone.export and bin/export_model.py."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bin import cli
from bin import export_model
from tests.standalone import test_train_eval
from tests.e2e import tiny
from tunas_search.runtime import tflite
from tunas_search.space import architecture
from tunas_search.standalone import export
from tunas_search.config.export import ExportOptions
from tunas_search.standalone import train_eval

tf1 = tf.compat.v1
SPEC = tiny.tiny_spec()


def _seeded_values(variables, rng):
  """Fixed values for every variable, drawn from `rng`.

  `tflite.inference_graph` builds its variables before any graph seed can be
  set, so their initializers are unseeded; the test assigns its own values
  instead. Weights are scaled by 1/sqrt(fan-in) so that the logits stay
  O(1); BN scales and moving statistics lie in [0.5, 1.5], so that
  inference-mode BN is exercised with non-trivial statistics.
  """
  values = {}
  for var in variables:
    shape = var.shape.as_list()
    if 'moving' in var.name or 'gamma' in var.name:
      values[var] = rng.uniform(0.5, 1.5, shape)
    elif len(shape) > 1:
      fan_in = int(np.prod(shape[:-1]))
      values[var] = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
    else:  # Biases and BN offsets.
      values[var] = rng.normal(0.0, 0.1, shape)
  return {v: x.astype(np.float32) for v, x in values.items()}


def write_run(model_dir, indices=test_train_eval.LARGEST):
  """A train_eval model dir with a checkpoint, written without training.

  Returns:
    The logits of the checkpointed network on fixed images, and the images.
  """
  config = test_train_eval.make_config(model_dir, indices=indices)
  train_eval.prepare(config, SPEC)
  masked = architecture.with_indices(SPEC, architecture.parse_indices(
      indices))
  graph, images, logits, _ = tflite.inference_graph(masked, 28, 1, 10)
  rng = np.random.default_rng(1)
  batch = rng.standard_normal([4, 28, 28, 1]).astype(np.float32)
  with graph.as_default(), tf1.Session() as session:
    network = tf1.global_variables()
    step = tf1.train.get_or_create_global_step()
    session.run(tf1.global_variables_initializer())
    for var, value in _seeded_values(network, rng).items():
      var.load(value, session)
    session.run(step.assign(7))
    tf1.train.Saver().save(session, os.path.join(str(model_dir),
                                                 'model.ckpt'), global_step=7)
    return session.run(logits, {images: batch}), batch


def test_export_matches_the_checkpointed_network(tmp_path):
  expected, batch = write_run(tmp_path)
  result = export.export_run(str(tmp_path))
  assert result.global_step == 7
  assert result.export_dir == os.path.join(str(tmp_path), 'export')
  assert result.input_shape == [-1, 28, 28, 1]
  # The embedded Fashion-MNIST constants, copied as they are: no rounding.
  assert (result.mean, result.std) == ([0.2865], [0.3539])
  info = json.loads(open(os.path.join(result.export_dir,
                                      export.INFO_FILENAME)).read())
  assert info['architecture'] == test_train_eval.LARGEST
  served = tf.saved_model.load(result.saved_model_dir).signatures[
      tflite.SIGNATURE_KEY](images=tf.constant(batch))
  # The same float32 kernels, but the SavedModel runs through grappler,
  # which may fold BN and reorder sums: float32 rounding on O(1) logits.
  np.testing.assert_allclose(served['logits'].numpy(), expected, atol=1e-5)
  with open(result.tflite_path, 'rb') as f:
    lite = tflite.run_tflite(f.read(), batch)
  # TFLite's own kernels fold BN into the convolutions and accumulate in
  # another order (XNNPACK): float32 differences ~10x those above.
  np.testing.assert_allclose(lite['logits'], expected, atol=1e-4)
  # Exporting again replaces the earlier export.
  again = export.export_run(str(tmp_path),
                            options=ExportOptions(tflite=False))
  assert again.tflite_path is None


def test_export_errors(tmp_path):
  with pytest.raises(export.ExportError, match='holds no train_eval run'):
    export.export_run(str(tmp_path))
  train_eval.prepare(test_train_eval.make_config(tmp_path), SPEC)
  with pytest.raises(export.ExportError, match='has no checkpoint to export'):
    export.export_run(str(tmp_path))
  (tmp_path / 'other').mkdir()
  (tmp_path / 'other' / 'notes.txt').write_text('x')
  with pytest.raises(export.ExportError, match='is not a SavedModel'):
    export._fresh_dir(str(tmp_path / 'other'))  # pylint: disable=protected-access


def test_export_cli(tmp_path, capsys):
  write_run(tmp_path / 'run')
  flag_values = flags.FlagValues()
  export_model.define_flags(flag_values)
  flag_values(['export_model', f'--model_dir={tmp_path / "run"}',
               f'--export_dir={tmp_path / "out"}', '--notflite'])
  export_model.main(['export_model'], flag_values)
  printed = json.loads(capsys.readouterr().out)
  assert printed['global_step'] == 7
  assert os.path.exists(tmp_path / 'out' / 'saved_model' / 'saved_model.pb')
  flag_values = flags.FlagValues()
  export_model.define_flags(flag_values)
  flag_values(['export_model', f'--model_dir={tmp_path / "none"}'])
  with pytest.raises(cli.UsageError, match='holds no train_eval run'):
    export_model.main(['export_model'], flag_values)

