"""Tests for replicas.model_optimizer: one RMSProp for search and train/eval."""

import pytest
import tensorflow as tf

from tunas_search.config import SearchConfig
from tunas_search.runtime import replicas
from tunas_search.config.standalone import TrainEvalConfig

tf1 = tf.compat.v1
_COMMON = dict(model_dir='/tmp/unused', num_classes=10,
               num_train_examples=1000, image_size=32, train_batch_size=32,
               model_momentum=0.8, model_rmsprop_decay=0.7,
               model_rmsprop_epsilon=0.5)


@pytest.mark.parametrize('config', [
    SearchConfig(search_space='proxylessnas_search',
                 rl_cost_model_target=84.0, **_COMMON),
    TrainEvalConfig(search_space='proxylessnas_search', indices='0',
                    **_COMMON),
], ids=['search', 'train_eval'])
def test_model_optimizer_reads_the_config(config):
  optimizer = replicas.model_optimizer(config, 0.25)
  # On CPU the optimizer is not wrapped (replicas.maybe_cross_shard).
  assert type(optimizer) is tf1.train.RMSPropOptimizer  # pylint: disable=unidiomatic-typecheck
  # pylint: disable=protected-access
  assert (optimizer._learning_rate, optimizer._decay, optimizer._momentum,
          optimizer._epsilon) == (0.25, 0.7, 0.8, 0.5)
