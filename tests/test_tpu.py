"""Tests for the TPU helpers' CPU paths and summary packing."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2  # pylint: disable=g-direct-tensorflow-import

from tunas_search import tpu

tf1 = tf.compat.v1


def test_cross_replica_mean_is_identity_on_one_replica():
  with tf.Graph().as_default():
    x = tf.constant(2.5)
    y = tpu.cross_replica_mean(x, num_replicas=1, use_tpu=False)
    # No TPU op may appear in a CPU graph.
    assert not any('Tpu' in op.type or 'CrossReplica' in op.type
                   for op in tf1.get_default_graph().get_operations())
    with tf1.Session() as sess:
      assert sess.run(y) == 2.5


def test_optimizer_is_wrapped_only_on_tpu():
  opt = tf1.train.GradientDescentOptimizer(0.1)
  assert tpu.maybe_cross_shard(opt, use_tpu=False) is opt
  assert isinstance(tpu.maybe_cross_shard(opt, use_tpu=True),
                    tf1.tpu.CrossShardOptimizer)


def test_pack_summaries_sorts_names_and_keeps_values():
  with tf.Graph().as_default():
    names, packed = tpu.pack_summaries({'b': tf.constant(2.0),
                                        'a': tf.constant([3], tf.int32)})
    with tf1.Session() as sess:
      values = sess.run(packed)
  assert names == ['a', 'b']
  np.testing.assert_allclose(values, [[3.0, 2.0]])


def test_pack_summaries_gathers_vector_entries_once_per_vector():
  with tf.Graph().as_default() as graph:
    vector = tf.constant([[10.0, 11.0], [12.0, 13.0]])
    other = tf.constant([7, 8], tf.int32)
    names, packed = tpu.pack_summaries({
        'v/3': tpu.Entry(vector, 3), 'v/0': tpu.Entry(vector, 0),
        'o/1': tpu.Entry(other, 1), 'plain': tf.constant(2.5),
        'a': tpu.Entry(vector, 1)})
    wide = tf.range(64.0)
    before = len(graph.get_operations())
    _, wide_packed = tpu.pack_summaries(
        {f'w/{i:02d}': tpu.Entry(wide, 63 - i) for i in range(64)})
    added = len(graph.get_operations()) - before
    with tf1.Session() as sess:
      values = sess.run(packed)
      np.testing.assert_array_equal(sess.run(wide_packed), [63 - np.arange(64)])
      sliced = sess.run(tpu.summary_tensors({'x': tpu.Entry(vector, 2)}))
  assert names == ['a', 'o/1', 'plain', 'v/0', 'v/3']
  np.testing.assert_allclose(values, [[11.0, 8.0, 2.5, 10.0, 13.0]])
  assert sliced == {'x': 12.0}
  # One flatten, one gather: no op per entry.
  assert added <= 8, [op.type for op in graph.get_operations()[before:]]


@pytest.mark.parametrize('entry, message', [
    (lambda: tpu.Entry(tf.zeros([2, 2]), 4), 'entry 4 of a tensor of shape'),
    (lambda: tpu.Entry(tf.zeros([2, 2]), -1), 'entry -1 of a tensor'),
    (lambda: tpu.Entry(tf1.placeholder(tf.float32, [None]), 0),
     'need a static shape'),
])
def test_pack_summaries_refuses_entries_outside_their_tensor(entry, message):
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match=message):
      tpu.pack_summaries({'x': entry()})


def test_host_call_writes_scalars_every_n_steps(tmp_path):
  with tf.Graph().as_default():
    step = tf1.placeholder(tf.int64, [])
    names, packed = tpu.pack_summaries({'x/y': tf.cast(step, tf.float32) * 2})
    fn, tensors = tpu.make_host_call(str(tmp_path), names, packed, step,
                                     every_n_steps=2)
    ops = fn(*tensors)
    # TPUEstimator's host-call hook runs the writer's init and flush ops;
    # this test does the same by hand.
    init = summary_ops_v2.summary_writer_initializer_op()
    with tf1.Session() as sess:
      sess.run(init)
      for s in range(5):
        sess.run(ops, {step: s})
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  acc = event_accumulator.EventAccumulator(
      str(tmp_path), size_guidance={event_accumulator.TENSORS: 0})
  acc.Reload()
  events = acc.Tensors('x/y')
  assert [e.step for e in events] == [0, 2, 4]
  assert [float(tf.make_ndarray(e.tensor_proto)) for e in events] == [0, 4, 8]


def test_format_seconds():
  assert tpu.format_seconds(59) == '0m59s'
  assert tpu.format_seconds(3723) == '1h02m03s'
  assert tpu.format_seconds(float('inf')) == 'unknown'


def test_checkpoint_logger_logs_the_step(monkeypatch):
  messages = []
  monkeypatch.setattr(tpu.logging, 'info',
                      lambda fmt, *args: messages.append(fmt % args))
  tpu.CheckpointLogger().after_save(None, 120)
  assert messages == ['Saved checkpoint at step 120']


@pytest.mark.parametrize('steps_per_run, total, expected', [
    (1, 100, (7, 7)),  # CPU: one step a run.
    (3, 100, (7, 9)),  # TPU: one host loop a run.
    (3, 8, (7, 8)),  # The last host loop stops at the total.
])
def test_step_tracker_names_the_steps_of_the_run_that_failed(
    steps_per_run, total, expected):
  with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    train = step.assign_add(steps_per_run)
    with tf.control_dependencies([train]):
      # NaN once the run has gone past step 6, like a diverged model.
      loss = tf.where(step.read_value() > 6, float('nan'), 1.0)
    tracker = tpu.StepTracker(steps_per_run, total)
    with pytest.raises(tf1.train.NanLossDuringTrainingError):
      with tf1.train.MonitoredSession(
          hooks=[tracker, tf1.train.NanTensorHook(loss)]) as sess:
        while True:
          sess.run(train)
  assert tracker.last_run_steps == expected


def test_step_tracker_counts_from_a_restored_step():
  with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    train = step.assign_add(1)
    restore = step.assign(40)  # Stands in for restoring a checkpoint.
    tracker = tpu.StepTracker(steps_per_run=1, total_steps=100)
    scaffold = tf1.train.Scaffold(
        init_fn=lambda scaffold, sess: sess.run(restore))
    with tf1.train.MonitoredSession(
        session_creator=tf1.train.ChiefSessionCreator(scaffold=scaffold),
        hooks=[tracker]) as sess:
      sess.run(train)
      sess.run(train)
  assert tracker.last_run_steps == (42, 42)


class _RunValues:
  def __init__(self, step):
    self.results = step


def test_progress_hook_logs_first_step_then_rates_and_eta(monkeypatch):
  logged = []
  monkeypatch.setattr(tpu.logging, 'info',
                      lambda fmt, *args: logged.append(fmt % args))
  clock = iter([100.0, 102.0, 104.0, 106.0])
  monkeypatch.setattr(tpu.time, 'time', lambda: next(clock))
  hook = tpu.ProgressHook(total_steps=10, batch_size=8, every_n_steps=2)
  for step in range(4):  # The global step read before each update.
    hook.after_run(None, _RunValues(step))
  # The first run (graph optimisation) is announced, not timed; rates are
  # measured from its end: 1 step in 2 s, then 3 steps in 6 s.
  assert logged == [
      'search: first step done (step 1)',
      'search step 2/10 (20.0%): 0.50 steps/s, 4.0 images/s, ETA 0m16s',
      'search step 4/10 (40.0%): 0.50 steps/s, 4.0 images/s, ETA 0m12s']


def test_progress_hook_reports_the_graph_size_with_the_first_step(
    monkeypatch):
  logged = []
  monkeypatch.setattr(tpu.logging, 'info',
                      lambda fmt, *args: logged.append(fmt % args))
  with tf.Graph().as_default() as graph:
    tf1.train.create_global_step()
    tf.constant(1.0) + tf.constant(2.0)  # pylint: disable=expression-not-assigned
    hook = tpu.ProgressHook(total_steps=10, batch_size=8, every_n_steps=2)
    hook.begin()
    ops = len(graph.get_operations())
  hook.after_run(None, _RunValues(0))
  assert logged == [f'search: first step done (step 1; a graph of {ops} ops)']


def test_session_config_on_a_cpu_host_drops_gpu_only_rewrites():
  from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  rewriter = rewriter_config_pb2.RewriterConfig
  config = tpu.session_config()
  assert config.allow_soft_placement
  rewrites = config.graph_options.rewrite_options
  # The estimator's own default: one round of optimisers.
  assert rewrites.meta_optimizer_iterations == rewriter.ONE
  assert rewrites.layout_optimizer == rewriter.OFF
  assert rewrites.memory_optimization == rewriter.NO_MEM_OPT
  assert rewrites.constant_folding == rewriter.DEFAULT  # It speeds steps.
  # With a GPU the layout optimiser (NHWC -> NCHW) stays on.
  gpu = tpu.session_config(has_gpu=True).graph_options.rewrite_options
  assert gpu.layout_optimizer == rewriter.DEFAULT
  assert gpu.memory_optimization == rewriter.DEFAULT_MEM_OPT
  # A mirrored search's config is kept and not modified.
  base = tf.compat.v1.ConfigProto(device_count={'CPU': 2})
  merged = tpu.session_config(base)
  assert merged.device_count['CPU'] == 2
  assert merged.graph_options.rewrite_options.layout_optimizer == rewriter.OFF
  assert base.graph_options.rewrite_options.layout_optimizer == (
      rewriter.DEFAULT)
  # A search's graph also drops the passes that left it unchanged; the
  # ones that change it stay, and a GPU keeps every pass.
  search = tpu.session_config(search_graph=True).graph_options.rewrite_options
  for name in ('function_optimization', 'loop_optimization',
               'implementation_selector'):
    assert getattr(search, name) == rewriter.OFF, name
    assert getattr(rewrites, name) == rewriter.DEFAULT, name
    assert getattr(tpu.session_config(
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
  config = tpu.make_run_config(str(tmp_path), use_tpu=False,
                               iterations_per_loop=2, num_shards=1,
                               save_checkpoints_steps=10,
                               keep_checkpoint_max=2)
  assert config.session_config == tpu.session_config(
      has_gpu=bool(tf.config.list_physical_devices('GPU')))
  search = tpu.make_run_config(str(tmp_path), use_tpu=False,
                               iterations_per_loop=2, num_shards=1,
                               save_checkpoints_steps=10,
                               keep_checkpoint_max=2, search_graph=True)
  assert search.session_config == tpu.session_config(
      has_gpu=bool(tf.config.list_physical_devices('GPU')),
      search_graph=True)


def test_pin_control_ops_moves_small_ops_computed_from_the_host():
  tf1 = tf.compat.v1
  with tf.Graph().as_default() as graph:
    with tf.device(tpu.HOST):
      mask = tf.constant([0.0, 1.0, 0.0])
      counts = tf1.get_variable('counts', initializer=tf.zeros([3], tf.int64))
    # Unplaced and computed, like the network's activations.
    images = tf1.placeholder(tf.float32, [2, 8, 8, 3]) + 1.0
    first = len(graph.get_operations())
    entries = tf.unstack(mask, 3)
    active = entries[1] > 0  # Reads an unplaced scalar Const.
    both = tf.logical_or(active, entries[0] > 0)
    gathered = tf.gather(counts, [0, 2])  # Colocated with its variable.
    missed = gathered > 0
    wide = tf.tile(mask, [2000])  # Too large.
    scaled = images * entries[1]  # Reads an activation.
    noise = tf.random.uniform([]) + entries[1]  # Reads a stateful op.
    routed, _ = tf.raw_ops.Switch(data=images, pred=active)
    merged = tf.raw_ops.Merge(inputs=[images, routed])
    index_test = tf.equal(merged.value_index, 1)  # Host memory on a GPU.
    placed = tpu.pin_control_ops(graph.get_operations()[first:])
  on_host = {op.name for op in placed}
  for tensor in [*entries, active, both, missed, index_test]:
    assert tensor.op.name in on_host, tensor.op.name
  # The comparisons' constants moved with their readers.
  assert active.op.inputs[1].op.name in on_host
  for tensor in (wide, scaled, noise, routed, merged.output, gathered):
    assert tensor.op.name not in on_host, tensor.op.name
    assert not tensor.op.device
  assert set(op.device for op in placed) == {tpu.HOST}
