#!/usr/bin/env python3
"""Training images/s of the search step at the scale users run; one JSON object.

  .venv/bin/python bench/throughput.py [--search_space=proxylessnas_search]
      [--image_size=224] [--batch_size=128] [--variants=graph:float32]
  .venv/bin/python bench/throughput.py --image_size=32 --batch_size=2 \\
      --steps=2 --repeats=1           # a rehearsal on a CPU, in a minute

For each variant (`BUILD:DTYPE`: the step built as TensorFlow's graph or
compiled by XLA, `step_build`; computing in float32 or bfloat16,
`use_bfloat16`), three sides are built and timed in one process:
  search: the real search model_fn's step (the controller pinned to one
    random architecture, `--arch_seed`, as bench/search_step.py pins it);
  train: one training step of that architecture built stand-alone at its
    own widths (batch-statistics BN, RMSProp), in the same dtype and build;
  validation: its inference pass on the validation batch (4x the training
    batch), as the search step scores it.
The data are synthetic: seeded images and labels held in variables on the
device, so no dataset and no input pipeline is measured (a search reads
its batches through tf.data). Timings interleave every variant and side,
in reversed order every other round, and keep each side's fastest round.

Keys: benchmark ('throughput'), search_space, image_size,
train_batch_size, validation_batch_size, num_classes, architecture,
device (the GPU's name, or 'cpu'), steps, repeats, goal_images_per_s (issue
48's goal for proxylessnas_search at 224x224 on one H100), and variants,
mapping each variant to:
  plan: the search step's plan (`StepPlan.describe()`);
  search_ms, train_ms, validation_ms: one step of each side (the mean of
    --steps consecutive runs, the fastest of --repeats rounds);
  search_images_per_s, train_images_per_s: training images per second;
  validation_images_per_s: validation images per second;
  parts_images_per_s: training images per second of the train step and
    the validation pass run one after the other (what a search step must
    at least do per training image);
  search_vs_parts_ratio: search_ms / (train_ms + validation_ms);
  search_vs_goal: search_images_per_s / goal_images_per_s;
  imagenet_search_hours: hours of a 90-epoch search over ImageNet's
    1,231,121 training-split images at search_images_per_s
    (docs/method.md section 6);
  first_run_s: each side's first run (XLA compilation, Grappler, GPU
    kernels loaded or compiled from PTX), seconds;
  build_s: graph building of the search side and of the two parts, seconds;
  gpu_utilisation: each side's mean nvidia-smi utilisation (%) during its
    timed runs; null without a GPU or nvidia-smi;
  placement: per side, the ops of one traced run by device type, and the
    network op types that ran on a CPU although a GPU is present (a dtype
    without a GPU kernel shows here);
  error: instead of the timings, the first line of the error that stopped
    the variant (e.g. out of GPU memory); the other variants go on.
Top-level gpu_memory_used_mib_max: the most nvidia-smi saw in use (null
without a GPU).
"""

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
  sys.path.append(_BENCH)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top,wrong-import-position
import search_step  # Puts the checkout's library on the path first.

import numpy as np
import tensorflow as tf

import search_spaces
from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.search import model_fn as search
from tunas_search import supernet
from tunas_search.runtime import xla as runtime_xla
from tunas_search.config import ConfigError, SearchConfig
from tunas_search.config import plan as plan_lib
from tunas_search.tf_internals import xla

tf1 = tf.compat.v1
BUILDS = ('graph', 'xla')
DTYPES = ('float32', 'bfloat16')
SIDES = ('search', 'train', 'validation')
# Issue 48: a 90-epoch ImageNet search of proxylessnas_search in under 12
# hours on one H100.
GOAL_IMAGES_PER_S = 2600
# docs/method.md section 6: 90 epochs over the training split.
IMAGENET_EPOCHS, IMAGENET_TRAIN_IMAGES = 90, 1231121
# Ops of the network whose placement on a CPU beside a GPU matters.
NETWORK_OPS = ('Conv2D', 'DepthwiseConv2dNative', 'FusedBatchNormV3',
               'Conv2DBackpropInput', 'Conv2DBackpropFilter',
               'DepthwiseConv2dNativeBackpropInput',
               'DepthwiseConv2dNativeBackpropFilter', 'FusedBatchNormGradV3',
               'Relu', 'Relu6', 'MatMul', 'Mean')


@dataclasses.dataclass(frozen=True)
class Variant:
  build: str  # BUILDS
  dtype: str  # DTYPES

  @property
  def name(self) -> str:
    return f'{self.build}:{self.dtype}'


def parse_variants(text: str) -> List[Variant]:
  """`BUILD:DTYPE[,BUILD:DTYPE...]` as variants, in the order given.

  Raises:
    ValueError: naming a malformed or repeated variant and the choices.
  """
  variants = []
  for item in [t.strip() for t in text.split(',') if t.strip()] or [text]:
    build, _, dtype = item.partition(':')
    if build not in BUILDS or dtype not in DTYPES:
      raise ValueError(f'unknown --variants entry {item!r}; valid: BUILD:DTYPE '
                       f'with BUILD one of {", ".join(BUILDS)} and DTYPE one '
                       f'of {", ".join(DTYPES)}, comma-separated')
    if Variant(build, dtype) in variants:
      raise ValueError(f'--variants names {item!r} twice')
    variants.append(Variant(build, dtype))
  return variants


def rates(ms: Dict[str, float], batch: int, validation_batch: int) -> dict:
  """Images/s, the search step against its parts and the goal.

  Args:
    ms: milliseconds of one step of each of `SIDES`.
    batch, validation_batch: the training and validation batch sizes.
  """
  search_s, train_s, validation_s = (ms[s] / 1000 for s in SIDES)
  search_rate = batch / search_s
  return {
      'search_images_per_s': round(search_rate, 1),
      'train_images_per_s': round(batch / train_s, 1),
      'validation_images_per_s': round(validation_batch / validation_s, 1),
      'parts_images_per_s': round(batch / (train_s + validation_s), 1),
      'search_vs_parts_ratio': round(search_s / (train_s + validation_s), 3),
      'search_vs_goal': round(search_rate / GOAL_IMAGES_PER_S, 3),
      'imagenet_search_hours': round(
          IMAGENET_EPOCHS * IMAGENET_TRAIN_IMAGES / search_rate / 3600, 1),
  }


class GpuSampler:
  """nvidia-smi's utilisation (%) and memory in use (MiB), sampled in the
  background: `samples` holds (time.monotonic(), utilisation, MiB)."""

  def __init__(self, command: Sequence[str]):
    self.samples: List[Tuple[float, float, float]] = []
    self._process = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    self._thread = threading.Thread(target=self._read, daemon=True)
    self._thread.start()

  def _read(self):
    for line in self._process.stdout:
      sample = parse_sample(line)
      if sample is not None:
        self.samples.append((time.monotonic(), *sample))

  def stop(self, grace_s: float = 0.0) -> None:
    """Ends the command (after `grace_s` seconds for it to end by itself)
    and reads what it printed."""
    try:
      self._process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
      self._process.terminate()
      self._process.wait()
    self._thread.join()


def nvidia_smi_command(period_ms: int) -> List[str]:
  return ['nvidia-smi', '-i', '0', '--query-gpu=utilization.gpu,memory.used',
          '--format=csv,noheader,nounits', f'--loop-ms={period_ms}']


def parse_sample(line: str) -> Optional[Tuple[float, float]]:
  """'93, 40213' -> (93.0, 40213.0); None for a line that is no sample."""
  try:
    utilisation, memory = (float(x) for x in line.split(','))
  except ValueError:
    return None
  return utilisation, memory


def mean_utilisation(samples, windows) -> Optional[float]:
  """Mean utilisation of the samples inside any of `windows` ((start, end)
  in time.monotonic() seconds); None if none falls inside."""
  inside = [u for t, u, _ in samples
            if any(start <= t <= end for start, end in windows)]
  return round(float(np.mean(inside)), 1) if inside else None


def _synthetic_batch(config: SearchConfig, seed: int):
  """Seeded images and labels in local variables: made once on the device,
  read by every step (no input pipeline, no copy from the host)."""
  size, classes = config.image_size, config.num_classes

  def held(name, value):
    return tf1.get_variable(name, initializer=value, trainable=False,
                            collections=[tf1.GraphKeys.LOCAL_VARIABLES],
                            use_resource=True).read_value()
  tensors = {}
  for k, (split, n) in enumerate((('train', config.train_batch_size),
                                  ('validation',
                                   config.validation_batch_size))):
    tensors[f'{split}_images'] = held(
        f'synthetic/{split}_images',
        tf.random.stateless_normal([n, size, size, 3], [seed, 2 * k]))
    tensors[f'{split}_labels'] = held(
        f'synthetic/{split}_labels', tf.random.stateless_uniform(
            [n], [seed, 2 * k + 1], 0, classes, tf.int32))
  return ({k: v for k, v in tensors.items() if k.endswith('images')},
          {k: v for k, v in tensors.items() if k.endswith('labels')})


def _initialised(graph: tf.Graph) -> tf1.Session:
  session = search_step.session_for(graph)
  with graph.as_default():
    session.run([tf1.global_variables_initializer(),
                 tf1.local_variables_initializer()])
  return session


def search_side(config: SearchConfig, spec, indices, has_gpu: bool):
  """(session, fetch, plan) of the search model_fn's step, pinned to
  `indices`."""
  plan = plan_lib.resolve(config, plan_lib.Environment(has_gpu=has_gpu))
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    features, labels = _synthetic_batch(config, config.seed)
    est = search.make_model_fn(config, plan, spec)(
        features, labels, tf.estimator.ModeKeys.TRAIN, {})
    _, packed = est.host_call[1]
    pin = search_step.pin_controller(schema.decisions(spec), indices)
  session = _initialised(graph)
  session.run(pin)
  return session, [est.train_op, packed], plan


def parts_side(config: SearchConfig, spec, indices, use_xla: bool):
  """(session, train fetch, validation fetch) of `indices` built
  stand-alone, trained as the search trains the supernet (batch-statistics
  BN, RMSProp), compiled by XLA where `use_xla`."""
  fixed = architecture.with_indices(spec, indices)
  form = supernet.forms.standalone(is_training=True, batch_norm_mode='batch')
  dtype = tf.bfloat16 if config.use_bfloat16 else tf.float32

  def train(images, labels):
    logits = supernet.build_network(fixed, images, config.num_classes, form,
                                    dtype=dtype)
    loss = tf1.losses.softmax_cross_entropy(
        tf.one_hot(labels, config.num_classes), logits,
        label_smoothing=config.label_smoothing)
    loss += supernet.regularization_loss(config.weight_decay)
    update = tf1.train.RMSPropOptimizer(
        0.01, decay=0.9, momentum=0.9, epsilon=1.0).minimize(loss)
    with tf.control_dependencies([update]):
      return [tf.identity(loss)]

  def validation(images, labels):
    logits = supernet.build_network(fixed, images, config.num_classes, form,
                                    dtype=dtype)
    correct = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
    return [tf.reduce_mean(tf.cast(correct, tf.float32))]

  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    features, labels = _synthetic_batch(config, config.seed)
    fetches = []
    for fn, split in ((train, 'train'), (validation, 'validation')):
      inputs = [features[f'{split}_images'], labels[f'{split}_labels']]
      fetches.append(xla.compile(fn, inputs) if use_xla else fn(*inputs))
  return (_initialised(graph), *fetches)


def placement(run_metadata, has_gpu: bool) -> dict:
  """Ops of a traced run by device type; network ops on a CPU beside a GPU."""
  devices, on_cpu = {}, {}
  for graph in run_metadata.partition_graphs:
    for node in graph.node:
      kind = 'gpu' if ':GPU:' in node.device.upper() else 'cpu'
      devices[kind] = devices.get(kind, 0) + 1
      if has_gpu and kind == 'cpu' and node.op in NETWORK_OPS:
        on_cpu[node.op] = on_cpu.get(node.op, 0) + 1
  return {'ops_by_device': devices, 'network_ops_on_cpu': on_cpu}


def _traced(session, fetch, has_gpu: bool) -> dict:
  options = tf1.RunOptions(trace_level=tf1.RunOptions.SOFTWARE_TRACE,
                           output_partition_graphs=True)
  meta = tf1.RunMetadata()
  session.run(fetch, options=options, run_metadata=meta)
  return placement(meta, has_gpu)


def timed(session, fetch, steps: int) -> Tuple[float, Tuple[float, float]]:
  """Seconds per run over `steps` consecutive runs after one warm-up run,
  and the (start, end) of those runs in time.monotonic()."""
  session.run(fetch)
  start = time.monotonic()
  for _ in range(steps):
    session.run(fetch)
  end = time.monotonic()
  return (end - start) / steps, (start, end)


def _config(args, variant: Variant) -> SearchConfig:
  space = search_spaces.get(args.search_space)
  return SearchConfig(
      search_space=args.search_space,
      model_dir=os.path.join(tempfile.gettempdir(),
                             'tunas_search_bench_throughput'),
      num_classes=args.num_classes, num_train_examples=IMAGENET_TRAIN_IMAGES,
      image_size=args.image_size, input_channels=3,
      train_batch_size=args.batch_size, max_steps=1000, seed=args.seed,
      # The controller is pinned: no warm-up, no controller learning.
      rl_delay_steps_fraction=1.0, increase_ops_warmup_steps_fraction=0.0,
      increase_filters_warmup_steps_fraction=0.0,
      cost_model=space.cost_model,
      cost_model_space=space.pixel1_model or space.cost_model_space,
      # The target only scales the reward, never the step's work.
      rl_cost_model_target=space.default_cost_target or 1.0,
      use_bfloat16=variant.dtype == 'bfloat16', step_build=variant.build,
      tpu_iterations_per_loop=1000000)


def build(config: SearchConfig, spec, indices, has_gpu: bool) -> dict:
  """A variant's three sides, built and run once: {'fetches': {side:
  (session, fetch)}, 'plan', 'build_s', 'first_run_s'}."""
  start = time.monotonic()
  session, fetch, plan = search_side(config, spec, indices, has_gpu)
  middle = time.monotonic()
  parts, train, validation = parts_side(config, spec, indices,
                                        config.step_build == 'xla')
  built = {'fetches': {'search': (session, fetch), 'train': (parts, train),
                       'validation': (parts, validation)},
           'plan': plan.describe(),
           'build_s': {'search': round(middle - start, 2),
                       'parts': round(time.monotonic() - middle, 2)},
           'first_run_s': {}}
  for side, (side_session, side_fetch) in built['fetches'].items():
    began = time.monotonic()
    side_session.run(side_fetch)
    built['first_run_s'][side] = round(time.monotonic() - began, 2)
  return built


def _error(e: Exception) -> str:
  return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def measure(args, variants: List[Variant], spec, indices, has_gpu: bool,
            sampler: Optional[GpuSampler]) -> Dict[str, dict]:
  """Every variant built, timed in interleaved rounds and traced once."""
  results, built = {}, {}
  for variant in variants:
    try:
      built[variant.name] = build(_config(args, variant), spec, indices,
                                  has_gpu)
    except (tf.errors.OpError, ValueError) as e:  # e.g. out of GPU memory
      results[variant.name] = {'error': _error(e)}
  keys = [(name, side) for name in built for side in SIDES]
  seconds = {k: [] for k in keys}
  windows = {k: [] for k in keys}
  for round_ in range(args.repeats):
    for name, side in keys if round_ % 2 == 0 else keys[::-1]:
      if name in results:
        continue  # Failed in an earlier round.
      try:
        step_s, window = timed(*built[name]['fetches'][side], args.steps)
      except tf.errors.OpError as e:
        results[name] = {'error': _error(e)}
        continue
      seconds[name, side].append(step_s)
      windows[name, side].append(window)
  validation_batch = _config(args, variants[0]).validation_batch_size
  for name, variant in built.items():
    if name in results:
      continue
    ms = {side: 1000 * min(seconds[name, side]) for side in SIDES}
    results[name] = {
        'plan': variant['plan'],
        **{f'{side}_ms': round(ms[side], 2) for side in SIDES},
        **rates(ms, args.batch_size, validation_batch),
        'first_run_s': variant['first_run_s'],
        'build_s': variant['build_s'],
        'gpu_utilisation': None if sampler is None else {
            side: mean_utilisation(sampler.samples, windows[name, side])
            for side in SIDES},
        'placement': {side: _traced(*variant['fetches'][side], has_gpu)
                      for side in SIDES},
    }
  return {v.name: results[v.name] for v in variants}


def _device_name(has_gpu: bool) -> str:
  if not has_gpu:
    return 'cpu'
  details = tf.config.experimental.get_device_details(
      tf.config.list_physical_devices('GPU')[0])
  return details.get('device_name', 'gpu')


def parse_args(argv: Optional[Sequence[str]] = None):
  """(args, variants) from the command line; a bad value exits 2 with one
  line naming it."""
  parser = argparse.ArgumentParser(prog='throughput.py',
                                   description=__doc__.split('\n')[0])
  parser.add_argument('--search_space', default='proxylessnas_search')
  parser.add_argument('--image_size', type=int, default=224)
  parser.add_argument('--batch_size', type=int, default=128,
                      help='training batch (validation: 4x)')
  parser.add_argument('--num_classes', type=int, default=1001,
                      help='1001: ImageNet with TuNAS\'s background class')
  parser.add_argument('--variants', default='graph:float32',
                      help='comma list of BUILD:DTYPE, BUILD in '
                      f'{"/".join(BUILDS)}, DTYPE in {"/".join(DTYPES)}')
  parser.add_argument('--steps', type=int, default=10,
                      help='consecutive runs timed per side and round')
  parser.add_argument('--repeats', type=int, default=3,
                      help='rounds (each side\'s fastest is kept)')
  parser.add_argument('--arch_seed', type=int, default=1,
                      help='seed of the random architecture measured')
  parser.add_argument('--seed', type=int, default=1,
                      help='seed of the synthetic data and of the step')
  parser.add_argument('--gpu_sample_ms', type=int, default=100,
                      help='nvidia-smi sampling period')
  args = parser.parse_args(argv)
  try:
    variants = parse_variants(args.variants)
  except ValueError as e:
    parser.error(str(e))
  for name in ('batch_size', 'steps', 'repeats', 'gpu_sample_ms'):
    if getattr(args, name) < 1:
      parser.error(f'--{name} must be >= 1, got {getattr(args, name)}')
  try:
    search_spaces.get(args.search_space)
    for variant in variants:
      _config(args, variant)
  except (ConfigError, ValueError, KeyError) as e:
    parser.error(str(e).strip('"\''))
  return args, variants


def main():
  args, variants = parse_args()
  has_gpu = bool(tf.config.list_physical_devices('GPU'))
  if not has_gpu and any(v.build == 'xla' for v in variants):
    runtime_xla.use_cpu_compile_options()  # Before the first XLA compile.
  spec = search_spaces.get(args.search_space).spec()
  indices = list(architecture.random_indices(
      spec, np.random.default_rng(args.arch_seed)))
  sampler = (GpuSampler(nvidia_smi_command(args.gpu_sample_ms))
             if has_gpu and shutil.which('nvidia-smi') else None)
  try:
    variant_results = measure(args, variants, spec, indices, has_gpu, sampler)
  finally:
    if sampler is not None:
      sampler.stop()
  print(json.dumps({
      'benchmark': 'throughput',
      'search_space': args.search_space,
      'image_size': args.image_size,
      'train_batch_size': args.batch_size,
      'validation_batch_size': _config(args,
                                       variants[0]).validation_batch_size,
      'num_classes': args.num_classes,
      'architecture': architecture.format_indices(indices),
      'device': _device_name(has_gpu),
      'steps': args.steps,
      'repeats': args.repeats,
      'goal_images_per_s': GOAL_IMAGES_PER_S,
      'variants': variant_results,
      'gpu_memory_used_mib_max': (
          max((m for _, _, m in sampler.samples), default=None)
          if sampler is not None else None),
  }, indent=2))


if __name__ == '__main__':
  main()
