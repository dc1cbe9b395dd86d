"""Tests for the runner's handling of a run stopped by a non-finite loss."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.search import runner
from tunas_search.runtime import progress

tf1 = tf.compat.v1
NAN, INF = float('nan'), float('inf')


def _write_checkpoints(model_dir, values_by_step):
  """Saves one checkpoint per step, like the estimator (relative paths).

  Args:
    model_dir: the directory.
    values_by_step: {step: (float32 [3] weights, bfloat16 [2] scale)}.

  Returns:
    {step: checkpoint prefix}.
  """
  paths = {}
  with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    weights = tf1.get_variable('weights', [3], tf.float32)
    scale = tf1.get_variable('scale', [2], tf.bfloat16)
    count = tf1.get_variable('count', [], tf.int64)
    w_in = tf1.placeholder(tf.float32, [3])
    s_in = tf1.placeholder(tf.bfloat16, [2])
    n_in = tf1.placeholder(tf.int64, [])
    assign = [weights.assign(w_in), scale.assign(s_in), count.assign(n_in)]
    saver = tf1.train.Saver(max_to_keep=10, save_relative_paths=True)
    with tf1.Session() as sess:
      for s, (w, sc) in sorted(values_by_step.items()):
        sess.run(assign + [step.assign(s)], {
            w_in: w, s_in: np.array(sc, tf.bfloat16.as_numpy_dtype),
            n_in: s})
        paths[s] = saver.save(sess, os.path.join(model_dir, 'model.ckpt'),
                              global_step=s)
  return paths


def _good():
  return [1.0, 2.0, 3.0], [1.0, 1.0]


def test_newest_finite_checkpoint_skips_checkpoints_holding_nan(tmp_path):
  paths = _write_checkpoints(str(tmp_path), {
      1: _good(), 2: _good(), 3: ([1.0, NAN, 3.0], [1.0, 1.0]),
      4: ([1.0, 2.0, 3.0], [INF, 1.0])})
  assert model_dir_lib.damage(paths[2], require_finite=True) is None
  assert model_dir_lib.damage(paths[3], require_finite=True)
  # bfloat16 is checked too.
  assert model_dir_lib.damage(paths[4], require_finite=True)
  assert model_dir_lib.newest_intact(str(tmp_path),
                                    require_finite=True) == paths[2]


def test_newest_finite_checkpoint_is_the_latest_when_all_are_finite(
    tmp_path):
  paths = _write_checkpoints(str(tmp_path), {1: _good(), 2: _good()})
  assert model_dir_lib.newest_intact(str(tmp_path),
                                    require_finite=True) == paths[2]


def test_newest_finite_checkpoint_is_none_without_a_finite_one(tmp_path):
  assert model_dir_lib.newest_intact(str(tmp_path),
                                    require_finite=True) is None
  _write_checkpoints(str(tmp_path), {1: ([-INF, 0.0, 0.0], [1.0, 1.0])})
  assert model_dir_lib.newest_intact(str(tmp_path),
                                    require_finite=True) is None


def test_resume_from_rewinds_the_checkpoint_state(tmp_path):
  paths = _write_checkpoints(str(tmp_path), {
      1: _good(), 2: _good(), 3: ([NAN] * 3, [1.0, 1.0])})
  model_dir_lib.resume_from(str(tmp_path), paths[2])
  assert tf.train.latest_checkpoint(str(tmp_path)) == paths[2]
  state = tf.train.get_checkpoint_state(str(tmp_path))
  assert list(state.all_model_checkpoint_paths) == [paths[1], paths[2]]
  # Paths stay relative, so the directory can still be moved or copied.
  with open(os.path.join(str(tmp_path), 'checkpoint')) as f:
    assert str(tmp_path) not in f.read()
  # The non-finite checkpoint stays on disk for inspection.
  assert os.path.exists(paths[3] + '.index')


def _tracker(first, last):
  steps = progress.StepTracker(steps_per_run=last - first + 1, total_steps=100)
  steps.last_run_steps = (first, last)
  return steps


def test_error_names_the_step_and_the_newest_checkpoint(tmp_path):
  paths = _write_checkpoints(str(tmp_path), {2: _good(), 4: _good()})
  error = runner.non_finite_loss_error(str(tmp_path), _tracker(5, 5))
  assert str(error) == (
      f'the loss became NaN or infinite at step 5; newest all-finite '
      f'checkpoint: {paths[4]}; rerun the same command with a lower '
      '--model_learning_rate (or --rl_learning_rate) to resume from it')


def test_error_rewinds_past_a_non_finite_checkpoint(tmp_path):
  paths = _write_checkpoints(str(tmp_path), {
      2: _good(), 4: ([NAN] * 3, [1.0, 1.0])})
  error = str(runner.non_finite_loss_error(str(tmp_path), _tracker(5, 5)))
  assert (f'newest all-finite checkpoint: {paths[2]} (newer checkpoints hold '
          'NaN or inf; a rerun skips them);') in error
  assert tf.train.latest_checkpoint(str(tmp_path)) == paths[2]


@pytest.mark.parametrize('values, expected', [
    ({}, 'no checkpoint was written; rerun the same command with a lower '
         '--model_learning_rate (or --rl_learning_rate) to start over'),
    ({4: ([NAN] * 3, [1.0, 1.0])}, 'no checkpoint in {dir} is all finite; '
     'rerun with a new --model_dir and a lower --model_learning_rate (or '
     '--rl_learning_rate)'),
], ids=['no_checkpoint', 'none_finite'])
def test_error_without_a_finite_checkpoint(tmp_path, values, expected):
  _write_checkpoints(str(tmp_path), values)
  error = str(runner.non_finite_loss_error(str(tmp_path), _tracker(1, 1)))
  assert error == ('the loss became NaN or infinite at step 1; ' +
                   expected.format(dir=tmp_path))


def test_error_on_tpu_names_the_host_loop(tmp_path):
  error = str(runner.non_finite_loss_error(str(tmp_path), _tracker(101, 200)))
  assert error.startswith('the loss became NaN or infinite near step 200 '
                          '(TPU host loop of steps 101-200); ')


def _write_logits_checkpoint(model_dir, name):
  with tf.Graph().as_default():
    tf1.get_variable(name, [3, 2], tf.float32)
    tf1.get_variable('rlcontroller/baseline/ema', [], tf.float32)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      tf1.train.Saver().save(sess, os.path.join(model_dir, 'model.ckpt'),
                             global_step=4)


def test_checkpoints_with_one_logits_variable_per_decision_are_refused(
    tmp_path):
  """Checkpoints of older versions, which a search cannot restore."""
  _write_logits_checkpoint(str(tmp_path), 'rlcontroller/logits/blocks/0/op')
  before = sorted(os.listdir(tmp_path))
  with pytest.raises(runner.config_lib.ConfigError,
                     match='model.ckpt-4 stores one controller logits '
                     'variable per decision'):
    runner._check_logits_layout(str(tmp_path))  # pylint: disable=protected-access
  assert sorted(os.listdir(tmp_path)) == before


def test_checkpoints_with_grouped_logits_are_accepted(tmp_path):
  runner._check_logits_layout(str(tmp_path))  # pylint: disable=protected-access
  _write_logits_checkpoint(str(tmp_path), 'rlcontroller/logits/choices_2')
  runner._check_logits_layout(str(tmp_path))  # pylint: disable=protected-access
