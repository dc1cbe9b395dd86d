"""A tiny search space for end-to-end tests: real layers, seconds to build.

It has every kind of decision the real spaces have (op choices, a skippable
residual layer with nested decisions, searched widths and expansions), so the
search engine is exercised fully at a fraction of the graph-building cost.
"""

import dataclasses

import tensorflow as tf

from tests.e2e.tiny_spec import bneck, tiny_spec  # pylint: disable=unused-import
from tunas_search.search import model_fn as search
from tunas_search.config import plan as plan_lib
from tunas_search.config import SearchConfig


def tiny_config(model_dir, **overrides) -> SearchConfig:
  values = dict(
      search_space='tiny', model_dir=str(model_dir), num_classes=10,
      num_train_examples=10000, dataset='embedded', image_size=28,
      input_channels=1, train_batch_size=4, max_steps=6,
      rl_learning_rate=0.5, cost_model='madds', rl_cost_model_target=1.0e5,
      tpu_iterations_per_loop=2, save_checkpoints_steps=2, seed=3)
  values.update(overrides)
  return SearchConfig(**values)


def with_overrides(config: SearchConfig, **overrides) -> SearchConfig:
  return dataclasses.replace(config, **overrides)


def search_step_spec(config: SearchConfig, environment=plan_lib.Environment()):
  """`(graph, TPUEstimatorSpec)` of the search model_fn on zero batches of
  the config's sizes, as planned for `environment`."""
  model_fn = search.make_model_fn(
      config, plan_lib.resolve(config, environment), tiny_spec())
  train, validation = config.train_batch_size, config.validation_batch_size
  with tf.Graph().as_default() as graph:
    features = {'train_images': tf.zeros([train, 28, 28, 1]),
                'validation_images': tf.zeros([validation, 28, 28, 1])}
    labels = {'train_labels': tf.zeros([train], tf.int32),
              'validation_labels': tf.zeros([validation], tf.int32)}
    spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {})
  return graph, spec
