"""Tests for the session and run configs of the estimators."""

import tensorflow as tf

from tunas_search.runtime import estimators

tf1 = tf.compat.v1

def test_session_config_on_a_cpu_host_drops_gpu_only_rewrites():
  from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  rewriter = rewriter_config_pb2.RewriterConfig
  config = estimators.session_config()
  assert config.allow_soft_placement
  rewrites = config.graph_options.rewrite_options
  # The estimator's own default: one round of optimisers.
  assert rewrites.meta_optimizer_iterations == rewriter.ONE
  assert rewrites.layout_optimizer == rewriter.OFF
  assert rewrites.memory_optimization == rewriter.NO_MEM_OPT
  assert rewrites.constant_folding == rewriter.DEFAULT  # It speeds steps.
  # With a GPU the layout optimiser (NHWC -> NCHW) stays on.
  gpu = estimators.session_config(has_gpu=True).graph_options.rewrite_options
  assert gpu.layout_optimizer == rewriter.DEFAULT
  assert gpu.memory_optimization == rewriter.DEFAULT_MEM_OPT
  # A mirrored search's config is kept and not modified.
  base = tf.compat.v1.ConfigProto(device_count={'CPU': 2})
  merged = estimators.session_config(base)
  assert merged.device_count['CPU'] == 2
  assert merged.graph_options.rewrite_options.layout_optimizer == rewriter.OFF
  assert base.graph_options.rewrite_options.layout_optimizer == (
      rewriter.DEFAULT)
  # A search's graph also drops the passes that left it unchanged; the
  # ones that change it stay, and a GPU keeps every pass.
  search = estimators.session_config(
      search_graph=True).graph_options.rewrite_options
  for name in ('function_optimization', 'loop_optimization',
               'implementation_selector'):
    assert getattr(search, name) == rewriter.OFF, name
    assert getattr(rewrites, name) == rewriter.DEFAULT, name
    assert getattr(estimators.session_config(
        has_gpu=True, search_graph=True).graph_options.rewrite_options,
                   name) == rewriter.DEFAULT, name
  # The remapper fuses a search graph's batch norms with their activations
  # since op choices have no conds (docs/benchmarks.md, 2026-11-27; which
  # ops fuse depends on the CPU's oneDNN, so no test counts them).
  for name in ('constant_folding', 'arithmetic_optimization',
               'common_subgraph_elimination', 'dependency_optimization',
               'remapping'):
    assert getattr(search, name) == rewriter.DEFAULT, name


def test_run_config_uses_the_session_config_off_tpu(tmp_path):
  # The caller says whether a GPU runs the step (the runner probes it).
  for has_gpu in (False, True):
    config = estimators.make_run_config(str(tmp_path), use_tpu=False,
                                        iterations_per_loop=2, num_shards=1,
                                        save_checkpoints_steps=10,
                                        keep_checkpoint_max=2, has_gpu=has_gpu)
    assert config.session_config == estimators.session_config(
        has_gpu=has_gpu)
    search = estimators.make_run_config(str(tmp_path), use_tpu=False,
                                        iterations_per_loop=2, num_shards=1,
                                        save_checkpoints_steps=10,
                                        keep_checkpoint_max=2,
                                        search_graph=True, has_gpu=has_gpu)
    assert search.session_config == estimators.session_config(
        has_gpu=has_gpu, search_graph=True)
