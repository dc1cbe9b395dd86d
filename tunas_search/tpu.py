"""Where a step runs: TPU cores, several local devices, or one device.

On one replica (CPU, GPU, or `use_tpu=False`) the cross-replica operations are
identities and no TPU op is created, so the same model_fn runs everywhere.
Several GPUs of one host (or logical CPU devices, in tests) run the same
model_fn once per device under `tf.distribute.MirroredStrategy`
(`mirrored_strategy`); the cross-replica operations are then all-reduces.
"""

import time
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple, Union)

from absl import logging
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-direct-tensorflow-import

from tunas_search.config import TrainingFields

tf1 = tf.compat.v1


def _distributed_replica_context() -> Optional[tf.distribute.ReplicaContext]:
  """The tf.distribute replica context of a multi-device step, else None."""
  if not tf.distribute.has_strategy():
    return None
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return None
  return context


def cross_replica_mean(value: tf.Tensor, num_replicas: int,
                       use_tpu: bool) -> tf.Tensor:
  """Mean of `value` over replicas; the identity on one replica.

  TPU cores reduce with `cross_replica_sum`; the devices of a tf.distribute
  strategy (several GPUs, or logical CPUs in tests) with an all-reduce.
  """
  if use_tpu and num_replicas > 1:
    return tf1.tpu.cross_replica_sum(value) / float(num_replicas)
  context = _distributed_replica_context()
  if context is not None:
    # Not `context.all_reduce`: its gradient wrapper walks the graph into the
    # other replicas' variable reads and fails; no gradient flows through
    # these means.
    return context.merge_call(_mean_over_replicas, args=(value,))
  return tf.identity(value)


def _mean_over_replicas(strategy: tf.distribute.Strategy, value):
  """In cross-replica context: the mean, placed back on every replica."""
  return strategy.extended.reduce_to(tf.distribute.ReduceOp.MEAN, value,
                                     destinations=value)


def replica_id(use_tpu: bool, num_replicas: int) -> tf.Tensor:
  """int64 scalar: the index of the replica running this op (0 on one)."""
  if use_tpu and num_replicas > 1:
    from tensorflow.compiler.tf2xla.python import xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    return tf.cast(xla.replica_id(), tf.int64)
  context = _distributed_replica_context()
  if context is not None:
    return tf.cast(context.replica_id_in_sync_group, tf.int64)
  return tf.constant(0, tf.int64)


def maybe_cross_shard(optimizer: tf1.train.Optimizer,
                      use_tpu: bool) -> tf1.train.Optimizer:
  """Wraps `optimizer` so gradients are averaged across TPU cores (TPU only)."""
  if use_tpu:
    return tf1.tpu.CrossShardOptimizer(optimizer)
  return optimizer


def model_optimizer(config: TrainingFields,
                    learning_rate: Union[float, tf.Tensor]
                    ) -> tf1.train.Optimizer:
  """The model weights' RMSProp (docs/method.md section 6), cross-shard on TPU.

  One recipe for the search's shared weights and for stand-alone training.

  Args:
    config: a search or train/eval config; reads `model_rmsprop_decay`,
      `model_momentum`, `model_rmsprop_epsilon` and `use_tpu`.
    learning_rate: float, or float32 scalar tensor (a schedule).
  """
  return maybe_cross_shard(tf1.train.RMSPropOptimizer(
      learning_rate, decay=config.model_rmsprop_decay,
      momentum=config.model_momentum, epsilon=config.model_rmsprop_epsilon),
                           config.use_tpu)


def computed_once(x: tf.Tensor) -> tf.Tensor:
  """The float32 tensor `x`, as XLA computes it once per step.

  XLA's fusion copies a chain of cheap ops into every consumer but never a
  reduction's input. Without this, the learning-rate schedules (~17 ops) and
  the finite check's 0/1 scale were copied into each variable's update
  fusion (~660 for a full space), and the controller's masks (with the
  warm-up schedule) into each of their scalar uses (docs/xla.md, "Where the
  time goes"). `x / 2 + x / 2` is exactly `x` for 0 and every
  `|x| >= 2^-125` (a cosine schedule's smallest positive rate is ~1e-8 of
  its base; masks are 0, 1 or 1/n), and XLA does not simplify a 2 x 2
  reduction away.
  """
  half = x * 0.5
  zeros = tf.zeros_like(half)
  pairs = tf.stack([tf.stack([half, half]), tf.stack([zeros, zeros])])
  return tf.reduce_sum(pairs, axis=1)[0]


HOST = '/device:CPU:0'
# Frame ops of v1 while loops must share a device with their loop.
_FRAME_OPS = frozenset({'Enter', 'RefEnter', 'Exit', 'RefExit',
                        'NextIteration', 'RefNextIteration', 'LoopCond'})


def _small(op: tf.Operation, max_elements: int) -> bool:
  """Whether every output of `op` has a known shape of few elements."""
  return all(t.shape.is_fully_defined() and
             t.shape.num_elements() <= max_elements for t in op.outputs)


def pin_control_ops(ops: Sequence[tf.Operation], device: str = HOST,
                    max_elements: int = 1024) -> List[tf.Operation]:
  """Places on `device` the small ops computed only from ops already there.

  A search's controller runs on the host (`controller_placement`), but the
  network's build derives its control values from the sampled masks where it
  uses them: mask entries, `entry > 0` predicates, their `or`s, the deferred
  update's used flags. Left unplaced, TensorFlow puts each on the GPU, and
  every Switch predicate then travels back to host memory (a device-to-host
  copy that waits for the GPU's queue): ~760 per `proxylessnas_search` step
  on an H100 (docs/benchmarks.md, "GPU, 2026-11-27"). This walks `ops` in
  creation order (topological for the data edges of a graph without while
  loops) and moves each op that has no device or colocation of its own, is
  stateless, has at least one input and only inputs on `device` (placed
  or colocated there, small unplaced Consts, or a Merge's value_index, which
  a GPU keeps in host memory), and whose outputs are all known and at most
  `max_elements` elements; then every small unplaced Const that an op on
  `device` reads. Activations never qualify (they descend from the
  images), so the network's arithmetic stays where it was. Values do not
  change, only where they are computed.

  Returns:
    The ops it placed.
  """
  def free(op):  # No device or colocation of its own.
    return (not op.device and
            op.colocation_groups() == [f'loc:@{op.name}'.encode()])

  def small_const(op):
    return op.type == 'Const' and free(op) and _small(op, max_elements)

  def placed_on(op):
    """Its device, or where the placer will put it: with the op it is
    colocated with, or with the variable whose handle it reads."""
    if op.device:
      return op.device
    if not free(op):
      name = op.colocation_groups()[0].decode()[len('loc:@'):]
      return op.graph.get_operation_by_name(name).device
    handles = [t.op for t in op.inputs if t.dtype == tf.resource]
    return placed_on(handles[0]) if handles else ''

  def there(t):
    # A Merge's value_index lives in host memory on a GPU too.
    host_merge_index = (device == HOST and t.op.type == 'Merge'
                        and t.value_index == 1)
    return (placed_on(t.op) == device or small_const(t.op)
            or host_merge_index)

  placed = []
  for op in ops:
    if (not free(op) or op.type in _FRAME_OPS or op.type == 'Const'
        or not op.inputs or op.op_def.is_stateful
        or not _small(op, max_elements)):
      continue
    if all(there(t) for t in op.inputs):
      op._set_device(device)  # pylint: disable=protected-access
      placed.append(op)
  # A constant read on `device` lives there: a GPU reader then copies it in
  # from the host, which does not wait for the GPU as a copy out would.
  for op in ops:
    if small_const(op) and any(placed_on(c) == device for t in op.outputs
                               for c in t.consumers()):
      op._set_device(device)  # pylint: disable=protected-access
      placed.append(op)
  return placed


class Entry(NamedTuple):
  """Entry `index` of a tensor (flattened, row-major), as a summary value.

  `pack_summaries` packs all entries of a vector with one gather, where a
  slice per entry would add four graph ops each (~1,800 ops and a second of
  graph building for a full space's logits and probabilities).
  """
  vector: tf.Tensor
  index: int


def summary_tensors(scalars: Dict[str, Union[tf.Tensor, Entry]]
                    ) -> Dict[str, tf.Tensor]:
  """`scalars` with each `Entry` sliced out as a scalar tensor."""
  return {name: tf.reshape(value.vector, [-1])[value.index]
          if isinstance(value, Entry) else value
          for name, value in scalars.items()}


def pack_summaries(scalars: Dict[str, Union[tf.Tensor, Entry]]
                   ) -> Tuple[List[str], tf.Tensor]:
  """Packs scalar summaries into one rank-1 float32 tensor for host_call.

  Outfeeding one tensor instead of hundreds keeps host_call cheap on TPU.

  Args:
    scalars: name -> a tensor of one element, or an `Entry` of a tensor
      with a static size (each distinct tensor is packed once).

  Returns:
    The names in sorted order (the packing order), and a float32 tensor of
    shape [1, n] (host calls concatenate per-replica tensors on their first
    axis).
  """
  names = sorted(scalars)
  pieces, offsets, positions, plain = [], {}, {}, []
  size = 0
  for name in names:
    value = scalars[name]
    if isinstance(value, Entry):
      key = id(value.vector)
      length = value.vector.shape.num_elements()
      if length is None or not 0 <= value.index < length:
        raise ValueError(f'summary {name}: entry {value.index} of a tensor '
                         f'of shape {value.vector.shape}; need a static '
                         'shape and 0 <= entry < its size')
      if key not in offsets:
        offsets[key] = size
        pieces.append(tf.reshape(tf.cast(value.vector, tf.float32), [-1]))
        size += length
      positions[name] = offsets[key] + value.index
    else:
      plain.append(name)
  if plain:
    pieces.append(tf.stack([tf.cast(tf.reshape(scalars[n], []), tf.float32)
                            for n in plain]))
    positions.update({n: size + k for k, n in enumerate(plain)})
  order = [positions[n] for n in names]
  packed = pieces[0] if len(pieces) == 1 else tf.concat(pieces, 0)
  if order != list(range(len(names))):
    packed = tf.gather(packed, order)
  return names, tf.reshape(packed, [1, -1])


def should_record(step: tf.Tensor, every_n_steps: Union[int, Sequence[int]],
                  final_step: Optional[int] = None) -> tf.Tensor:
  """Whether `step` is a multiple of any of `every_n_steps` or `final_step`.

  Args:
    step: int64 scalar.
    every_n_steps: one interval or several (e.g. the host loop and the
      checkpoint interval).
    final_step: a step always recorded (the last of a run), or None.

  Returns:
    A bool scalar.
  """
  if isinstance(every_n_steps, int):
    every_n_steps = [every_n_steps]
  checks = [tf.equal(step % n, 0) for n in every_n_steps]
  if final_step is not None:
    checks.append(tf.equal(step, final_step))
  return tf.reduce_any(tf.stack(checks))


def make_host_call(model_dir: str, names: Sequence[str], packed: tf.Tensor,
                   step: tf.Tensor, every_n_steps: Union[int, Sequence[int]],
                   final_step: Optional[int] = None):
  """Builds the (fn, tensors) pair for TPUEstimatorSpec.host_call.

  The host function writes replica 0's values as TensorBoard scalars named
  `names` under the step number `step`, when `should_record(step,
  every_n_steps, final_step)`, and flushes the events file at each such step,
  so a run killed later loses none of them (docs/method.md section 6). Steps
  that record nothing flush nothing.

  Args:
    model_dir: where the events file goes.
    names: the scalar names, in packing order (`pack_summaries`).
    packed: float32 [1, len(names)] from `pack_summaries`.
    step: integer scalar tensor, the step number the values are logged at.
    every_n_steps: record at multiples of this interval (or of any of these).
    final_step: also record at this step.
  """
  names = list(names)

  def host_call_fn(step, values):
    step = step[0]
    record = should_record(step, every_n_steps, final_step)
    writer = tf.summary.create_file_writer(model_dir, max_queue=1000)

    def write_and_flush():
      # One cond decides for every scalar; `record_if(record)` around the
      # writes would build a cond per scalar, which for a full space's ~500
      # scalars cost seconds of graph building.
      with writer.as_default(), tf.summary.record_if(True):
        written = [tf.summary.scalar(name, value, step=step)
                   for name, value in zip(names, tf.unstack(values[0]))]
      with tf.control_dependencies(written):
        flush = tf.summary.flush(writer)
      with tf.control_dependencies([flush]):
        return tf.constant(True)

    return [tf.cond(record, write_and_flush, lambda: tf.constant(False))]

  step = tf.reshape(tf.cast(step, tf.int64), [1])
  return host_call_fn, [step, packed]


class Mirrored(NamedTuple):
  """A tf.distribute strategy, the session config its devices need, and
  this process's place among the workers (one worker off multi-worker)."""
  strategy: tf.distribute.Strategy
  session_config: Optional[tf1.ConfigProto]
  worker: int = 0
  num_workers: int = 1

  @property
  def is_chief(self) -> bool:
    """Whether this worker writes the model dir (checkpoints, result)."""
    return self.worker == 0


def mirrored_strategy(num_replicas: int) -> Mirrored:
  """Mirrors a step over `num_replicas` devices of this host.

  The GPUs when at least that many are visible; on a machine without GPUs,
  as many logical CPU devices (how the tests run it, and a way to try a
  multi-GPU configuration on a laptop).

  Raises:
    ValueError: with some GPUs but fewer than `num_replicas`, or when
      TensorFlow started with fewer CPU devices than needed.
  """
  gpus = tf.config.list_physical_devices('GPU')
  if len(gpus) >= num_replicas:
    return Mirrored(tf.distribute.MirroredStrategy(
        [f'/gpu:{i}' for i in range(num_replicas)]), None)
  if gpus:
    raise ValueError(f'num_replicas={num_replicas} needs {num_replicas} GPUs; '
                     f'{len(gpus)} are visible')
  cpu = tf.config.list_physical_devices('CPU')[0]
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * num_replicas)
  except RuntimeError:  # Already initialised: use what exists.
    pass
  found = len(tf.config.list_logical_devices('CPU'))
  if found < num_replicas:
    raise ValueError(f'num_replicas={num_replicas} needs {num_replicas} CPU '
                     f'devices; TensorFlow started with {found}')
  # The default all-reduce hangs between logical CPU devices unless the
  # session sees them all; reducing on one device needs neither NCCL nor
  # collectives.
  return Mirrored(
      tf.distribute.MirroredStrategy(
          [f'/cpu:{i}' for i in range(num_replicas)],
          cross_device_ops=tf.distribute.ReductionToOneDevice()),
      tf1.ConfigProto(allow_soft_placement=True,
                      device_count={'CPU': num_replicas}))


def multi_worker_strategy(num_replicas: int) -> Mirrored:
  """Mirrors a step over the workers that TF_CONFIG describes.

  Worker 0 (or the `chief` task, if the cluster names one) is the chief.
  Each worker uses its local devices (as TensorFlow finds them).

  Raises:
    ValueError: without a cluster in TF_CONFIG, or when the cluster does not
      hold `num_replicas` replicas.
  """
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  cluster = resolver.cluster_spec().as_dict()
  if not cluster:
    raise ValueError('multi_worker needs the TF_CONFIG environment variable '
                     'to describe the cluster and this task')
  order = [t for t in ('chief', 'worker') if t in cluster]
  workers = [(t, i) for t in order for i in range(len(cluster[t]))]
  me = (resolver.task_type, resolver.task_id)
  if me not in workers:
    raise ValueError(f'TF_CONFIG task {me[0]}:{me[1]} is not among the '
                     f'cluster\'s workers {workers}')
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  found = strategy.num_replicas_in_sync
  if found != num_replicas:
    raise ValueError(f'num_replicas={num_replicas}, but the {len(workers)} '
                     f'workers in TF_CONFIG hold {found} replicas')
  return Mirrored(strategy, None, workers.index(me), len(workers))


# params key of a worker's (index, count) shard of the input (data.host_shard).
SHARD_PARAM = 'shard'


def per_replica_input_fn(input_fn: Callable, num_replicas: int,
                         worker: int = 0, num_workers: int = 1) -> Callable:
  """`input_fn` making each mirrored replica's share of the global batch.

  TPUEstimator passes the global batch size off TPU, and a MirroredStrategy
  hands each replica whole elements of the dataset. Each of several workers
  reads its own shard of the data.
  """
  if num_replicas == 1:
    return input_fn

  def split(params):
    params = dict(params)
    params['batch_size'] = params['batch_size'] // num_replicas
    if num_workers > 1:
      params[SHARD_PARAM] = (worker, num_workers)
    return input_fn(params)
  return split


def session_config(base: Optional[tf1.ConfigProto] = None,
                   has_gpu: bool = False,
                   search_graph: bool = False) -> tf1.ConfigProto:
  """The estimator's default session config, leaner on a CPU-only host.

  As the estimator's default (`base` None): soft placement and one round of
  Grappler's optimisers. Without a GPU, Grappler's layout optimiser (which
  converts convolutions to NCHW for GPUs) and memory optimiser (swapping and
  recomputation for accelerator memory) are turned off: they changed
  nothing in a search graph on a CPU but took 1.5-3 s of the first step of
  `proxylessnas_search` (docs/benchmarks.md, start-up), with no change in
  step time. Constant folding stays: without it steps were ~6% slower.

  A search graph on a CPU also goes without the function, loop and
  implementation-selector passes: they left it as it was but took time in
  its first run; Grappler as a whole takes 5-10 s there but makes
  `proxylessnas_search` steps 1-4% faster, so the passes that change the
  graph stay (docs/benchmarks.md, start-up). The remapper is one of them
  again: while every op choice sat in a cond it fused 2 of ~29,000 nodes
  and was off; since op choices lost their conds (2026-11-26) it fuses each
  training batch norm with its activation, and search steps ran 5% faster
  with it at 64x64, for ~1-2.6 s more of first run (docs/benchmarks.md,
  2026-11-27). Stand-alone training keeps every pass.

  Args:
    base: a config to start from (a mirrored search's), copied.
    has_gpu: whether a GPU will run the step.
    search_graph: the session runs a search step.
  """
  config = tf1.ConfigProto(allow_soft_placement=True)
  if base is not None:
    config.CopyFrom(base)
  rewrites = config.graph_options.rewrite_options
  rewrites.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
  if not has_gpu:
    rewrites.layout_optimizer = rewriter_config_pb2.RewriterConfig.OFF
    rewrites.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
    if search_graph:
      off = rewriter_config_pb2.RewriterConfig.OFF
      rewrites.function_optimization = off
      rewrites.loop_optimization = off
      rewrites.implementation_selector = off
  return config


def make_run_config(model_dir: str, use_tpu: bool, iterations_per_loop: int,
                    num_shards: int, save_checkpoints_steps: Optional[int],
                    keep_checkpoint_max: int, tpu: Optional[str] = None,
                    tpu_zone: Optional[str] = None,
                    gcp_project: Optional[str] = None,
                    seed: Optional[int] = None,
                    mirrored: Optional[Mirrored] = None,
                    search_graph: bool = False
                    ) -> tf1.estimator.tpu.RunConfig:
  """A TPU RunConfig; resolves the Cloud TPU by name only when `use_tpu`.

  `save_checkpoints_steps=None` turns the estimator's own checkpoint saver
  off, for a caller that passes its own (`model_dir.CheckpointSaver`).
  `mirrored` (off TPU) runs training on several local devices;
  `search_graph` selects the search's session config (`session_config`).
  """
  cluster = None
  if use_tpu:
    cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu, zone=tpu_zone, project=gcp_project)
  return tf1.estimator.tpu.RunConfig(
      cluster=cluster,
      model_dir=model_dir,
      tf_random_seed=seed,
      save_checkpoints_steps=save_checkpoints_steps,
      # Explicitly None: left out, it would default to every 600 s.
      save_checkpoints_secs=None,
      keep_checkpoint_max=keep_checkpoint_max,
      log_step_count_steps=None,  # ProgressHook logs instead.
      save_summary_steps=None,  # Summaries go through host_call.
      train_distribute=mirrored.strategy if mirrored else None,
      # On TPU, TPUEstimator builds the session config for the cluster.
      session_config=None if use_tpu else session_config(
          mirrored.session_config if mirrored else None,
          has_gpu=bool(tf.config.list_physical_devices('GPU')),
          search_graph=search_graph),
      tpu_config=tf1.estimator.tpu.TPUConfig(
          iterations_per_loop=iterations_per_loop,
          num_shards=num_shards if use_tpu else None,
          per_host_input_for_training=(
              tf1.estimator.tpu.InputPipelineConfig.PER_HOST_V2)))


def make_estimator(model_fn: Callable, run_config, use_tpu: bool,
                   train_batch_size: int,
                   eval_batch_size: Optional[int] = None,
                   predict_batch_size: Optional[int] = None,
                   params: Optional[dict] = None):
  """A TPUEstimator that runs on TPU, or on CPU/GPU with `use_tpu=False`."""
  return tf1.estimator.tpu.TPUEstimator(
      model_fn=model_fn, config=run_config, use_tpu=use_tpu,
      train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
      predict_batch_size=predict_batch_size, params=params or {})


class ProgressHook(tf1.train.SessionRunHook):
  """Logs step, steps/s, images/s and ETA every `every_n_steps` steps.

  On TPU the hook sees one run per host loop, so it logs once per loop.
  """

  def __init__(self, total_steps: int, batch_size: int, every_n_steps: int,
               label: str = 'search'):
    self._total = total_steps
    self._batch = batch_size
    self._every = max(1, every_n_steps)
    self._label = label
    self._last: Optional[Tuple[float, int]] = None
    self._last_logged = -1
    self._graph_ops: Optional[int] = None

  def begin(self):
    self._step = tf1.train.get_global_step()
    # The graph's size drives start-up (building, Grappler, the first run).
    self._graph_ops = len(tf1.get_default_graph().get_operations())

  def before_run(self, run_context):
    return tf1.train.SessionRunArgs(self._step)

  def after_run(self, run_context, run_values):
    step = int(run_values.results) + 1  # The value read before the update.
    now = time.time()
    if self._last is None:
      # The first run pays for graph optimisation; rates start after it.
      if self._graph_ops is None:
        logging.info('%s: first step done (step %d)', self._label, step)
      else:
        logging.info('%s: first step done (step %d; a graph of %d ops)',
                     self._label, step, self._graph_ops)
      self._last = (now, step)
      return
    if step - self._last_logged < self._every and step < self._total:
      return
    t0, s0 = self._last
    if step <= s0 or now <= t0:
      return
    rate = (step - s0) / (now - t0)
    eta = (self._total - step) / rate if rate > 0 else float('inf')
    logging.info('%s step %d/%d (%.1f%%): %.2f steps/s, %.1f images/s, '
                 'ETA %s', self._label, step, self._total,
                 100.0 * step / self._total, rate, rate * self._batch,
                 format_seconds(eta))
    self._last_logged = step


class StepTracker(tf1.train.SessionRunHook):
  """Knows which steps the latest session run covers, even when it failed.

  TPUEstimator stops a run whose loss is NaN by raising from a hook's
  `after_run`; the steps of the failed run are then `last_run_steps`. On CPU a
  run is one step; on TPU it is one host loop of `steps_per_run` steps.
  Steps are numbered like checkpoints: step n takes the global step from
  n - 1 to n.
  """

  def __init__(self, steps_per_run: int, total_steps: int):
    self._per_run = max(1, steps_per_run)
    self._total = total_steps
    self._done = 0
    self.last_run_steps: Optional[Tuple[int, int]] = None

  def begin(self):
    self._step = tf1.train.get_global_step()

  def after_create_session(self, session, coord):
    del coord
    self._done = int(session.run(self._step))

  def before_run(self, run_context):
    # Recorded before the run, so it is right whatever hook raises after it.
    first = self._done + 1
    self.last_run_steps = (first, min(self._done + self._per_run,
                                      max(first, self._total)))

  def after_run(self, run_context, run_values):
    # A separate read: fetching the step alongside the train op could return
    # its value from before or after the update.
    self._done = int(run_context.session.run(self._step))


def latest_step(model_dir: str) -> int:
  """Global step of the latest checkpoint in `model_dir`; 0 if there is none."""
  checkpoint = tf.train.latest_checkpoint(model_dir)
  if not checkpoint:
    return 0
  return int(tf.train.load_checkpoint(checkpoint).get_tensor(
      tf1.GraphKeys.GLOBAL_STEP))


class CheckpointLogger(tf1.estimator.CheckpointSaverListener):
  """Logs each checkpoint, so users know what a preemption would lose."""

  def after_save(self, session, global_step_value):
    del session
    logging.info('Saved checkpoint at step %d', global_step_value)


def format_seconds(seconds: float) -> str:
  """`1h02m03s` style duration."""
  if seconds == float('inf'):
    return 'unknown'
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'
