"""Estimators, run and session configs, and the strategy of several devices."""

from typing import Callable, NamedTuple, Optional

import tensorflow as tf

tf1 = tf.compat.v1


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
  recomputation for accelerator memory) are turned off: they change nothing
  in a search graph on a CPU but cost start-up time (bench/startup.py).
  Constant folding stays: it makes steps faster.

  A search graph on a CPU also goes without the function, loop and
  implementation-selector passes, which leave it as it is but take time in
  its first run; the passes that change it stay, since they make search
  steps faster than their cost at start-up, the remapper among them (it
  fuses each training batch norm with its activation now that op choices
  have no conds; docs/DESIGN.md, "Control flow"). Stand-alone training keeps
  every pass.

  Args:
    base: a config to start from (a mirrored search's), copied.
    has_gpu: whether a GPU will run the step.
    search_graph: the session runs a search step.
  """
  config = tf1.ConfigProto(allow_soft_placement=True)
  if base is not None:
    config.CopyFrom(base)
  rewrites = config.graph_options.rewrite_options
  # The RewriterConfig message class, reached without its private module.
  rewriter = type(rewrites)
  rewrites.meta_optimizer_iterations = rewriter.ONE
  if not has_gpu:
    rewrites.layout_optimizer = rewriter.OFF
    rewrites.memory_optimization = rewriter.NO_MEM_OPT
    if search_graph:
      off = rewriter.OFF
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
                    search_graph: bool = False, has_gpu: bool = False
                    ) -> tf1.estimator.tpu.RunConfig:
  """A TPU RunConfig; resolves the Cloud TPU by name only when `use_tpu`.

  `save_checkpoints_steps=None` turns the estimator's own checkpoint saver
  off, for a caller that passes its own (`model_dir.CheckpointSaver`).
  `mirrored` (off TPU) runs training on several local devices;
  `search_graph` and `has_gpu` (whether a GPU runs the step, as the caller
  probed it) select the session config (`session_config`).
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
          has_gpu=has_gpu, search_graph=search_graph),
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
