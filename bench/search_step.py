#!/usr/bin/env python3
"""Benchmarks one search step against its parts; prints one JSON object.

  .venv/bin/python bench/search_step.py [--search_space=proxylessnas_search]

The search step (the real model_fn's train op) is compared, in one process,
with what it must at least do: one training step of the sampled architecture
built stand-alone, plus one inference pass of that network on the validation
batch. The architecture is drawn at random (`--arch_seed`); the controller is
pinned to it (peaked logits, no warm-up, zero controller learning rate) so
both sides run the same path.

Keys:
  search_vs_sampled_parts_ratio: the search step computing at the sampled
    widths (`supernet_widths=auto` off TPU) with unused weights' RMSProp
    steps deferred (`unused_weight_steps=deferred`, what `auto` resolves
    to on one replica off TPU: the default search step) / (training
    step + validation inference of the architecture built stand-alone at
    its own widths); goal <= 1.10.
  every_step_vs_sampled_parts_ratio: the same with TuNAS's optimiser,
    every weight updated every step (`unused_weight_steps=every_step`, as
    TPU and several replicas run it; search_every_step_ms).
  search_vs_parts_ratio: search step in TuNAS's masked form (largest widths,
    masked; `supernet_widths=masked`; unused weights' steps deferred) / the
    same parts built at the largest widths of the sampled ops; goal <= 1.10.
  sampled_vs_masked_step_ratio: the two search steps; what computing at the
    sampled width saves.
  overlap_gain: search step with the validation pass made to wait for the
    weight update / the search step as built (`pre_update` validation runs
    concurrently with the update); > 1 is the gain of the overlap.
  deferred_vs_every_step_ratio: the search step (unused weights' RMSProp
    steps deferred) / the same with every weight updated every step
    (TuNAS's optimiser, `unused_weight_steps=every_step`); < 1 is what
    deferring saves.
  overhead_share: time of the controller, cost model, reward and summary
    packing alone, placed as the search step places them
    (`controller_placement`: on the host CPU with a GPU), as a share of the
    search step; goal <= 0.03.
  new_architecture_ratio: the first search step (sampled widths) on an
    architecture the session has not run / its later steps, over
    --new_archs further random architectures (means). A search samples a
    new architecture every step, and at sampled widths its tensors change
    shape: above 1 is what shapes the CPU's oneDNN kernels have not seen
    cost them (all other keys pin one architecture and never pay it).
  new_architecture_masked_ratio: the same for the masked form, whose shapes
    never change.
  supernet_update_ms: one RMSProp update (with zero gradients) of variables
    shaped like all the supernet's weights: what the every_step search step
    pays, whatever it samples, to keep every weight moving with its momentum
    as TuNAS's optimiser does; the stand-alone training step and the
    deferred search step update only the sampled network's weights.
  <part>_ms: each part timed, in ms (per repeat the median of --steps runs;
    the fastest repeat): search_ms (the search step: sampled widths,
    unused weights' steps deferred), search_masked_ms (the masked form),
    search_every_step_ms (sampled widths, every weight updated every step),
    search_serialised_ms (sampled widths, validation after the update),
    train_ms and inference_ms (the stand-alone
    parts at the architecture's widths), train_widest_ms and
    inference_widest_ms (at the largest widths of the sampled ops),
    overhead_ms (controller, cost model, reward and summary packing alone)
    and supernet_update_ms (above); new_arch_first_<form>_ms and
    new_arch_repeated_<form>_ms are the two sides of the new-architecture
    ratios (one measurement after the others, not the fastest of
    --repeats).
  The run's settings: benchmark ('search_step'), search_space, image_size,
    train_batch_size, validation_batch_size, architecture (the pinned
    architecture string), sides (what was built and timed),
    controller_placement and controller_on_host (what it resolved to).
  trace (with --trace_dir DIR): per timed key, the summary of one run of it
    with a software trace (bench/trace_summary.py's keys: where the step's
    time went, its critical path), its RunMetadata written to
    DIR/<key>.run_metadata.pb.gz; tracing slows ops, so a trace's step_ms
    reads above the timed one.

Every session is configured as the search's (`estimators.session_config` with
`search_graph`; the overhead and supernet-update sides too) or, for the
stand-alone parts, as stand-alone training's.

--sides limits the run to some sides (all by default); a ratio is printed
only when every part of it was timed. `--sides=search,parts` builds two
graphs instead of seven and skips the new architectures, so that an A/B of
two versions of the code on one machine (bench/ab.py, or
tools/gpu_offline/checks.sh's bench_ab) fits a short lease. With
TUNAS_BENCH_CODE=DIR in the environment, the library and search spaces come
from the checkout DIR, not this one; it must take a step plan
(`search.make_model_fn(config, plan, spec)`), else use bench/ab.py, which
runs each version's own copy of this script.
"""

import argparse
import json
import os
import sys
import time

# TUNAS_BENCH_CODE names another checkout whose tunas_search/ and
# search_spaces/ to time with this script (an A/B of two versions).
CODE = os.path.abspath(os.environ.get('TUNAS_BENCH_CODE') or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
if not os.path.isdir(os.path.join(CODE, 'tunas_search')):
  sys.exit(f'search_step.py: TUNAS_BENCH_CODE {CODE!r} holds no tunas_search/')
sys.path.insert(0, CODE)
# trace_summary.py beside this script (already on the path when it runs as one).
_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
  sys.path.append(_BENCH)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf

import search_spaces
from tunas_search.space import architecture
from tunas_search.controller import policy as controller
from tunas_search.controller import adam as controller_adam
from tunas_search import cost_models
from tunas_search.search import rewards
from tunas_search.space import schema
from tunas_search.search import model_fn as search
from tunas_search.search import step as step_lib
from tunas_search import supernet
from tunas_search.config import ConfigError, SearchConfig
from tunas_search.config import plan as plan_lib
from tunas_search.runtime import estimators
from tunas_search.runtime import host_call
from tunas_search.runtime import placement
import trace_summary

tf1 = tf.compat.v1
_PEAK = 30.0  # Logit margin that makes the pinned architecture certain.


def _config(args, model_dir: str, widths: str,
            unused_weight_steps: str = 'deferred') -> SearchConfig:
  space = search_spaces.get(args.search_space)
  placed = ({'controller_placement': args.controller_placement}
            if args.controller_placement else {})
  return SearchConfig(
      supernet_widths=widths, unused_weight_steps=unused_weight_steps,
      **placed,
      search_space=args.search_space, model_dir=model_dir, num_classes=10,
      num_train_examples=10000, image_size=args.image_size,
      input_channels=3, train_batch_size=args.batch_size,
      max_steps=1000, rl_delay_steps_fraction=1.0,
      increase_ops_warmup_steps_fraction=0.0,
      increase_filters_warmup_steps_fraction=0.0,
      # The space's own cost model (MAdds where Pixel-1 does not apply); an
      # older checkout (TUNAS_BENCH_CODE) has no cost_model_space.
      cost_model=space.cost_model,
      cost_model_space=(space.pixel1_model
                        or getattr(space, 'cost_model_space', None)),
      rl_cost_model_target=space.default_cost_target,
      tpu_iterations_per_loop=1000000)


def _batch(config: SearchConfig, rng):
  def images(n):
    return tf.constant(rng.normal(size=(n, config.image_size,
                                        config.image_size, 3)), tf.float32)
  def labels(n):
    return tf.constant(rng.integers(0, config.num_classes, size=n), tf.int32)
  b, v = config.train_batch_size, config.validation_batch_size
  return ({'train_images': images(b), 'validation_images': images(v)},
          {'train_labels': labels(b), 'validation_labels': labels(v)})


def session_for(graph: tf.Graph, search_graph: bool = True) -> tf1.Session:
  """A session configured as a search's (or stand-alone training's) is."""
  return tf1.Session(graph=graph, config=estimators.session_config(
      has_gpu=bool(tf.config.list_physical_devices('GPU')),
      search_graph=search_graph))


def _time(session, fetch, steps: int) -> float:
  """Median seconds per run of `fetch` after two warm-up runs."""
  for _ in range(2):
    session.run(fetch)
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    session.run(fetch)
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def trace(session, fetch, path: str, top: int = 5):
  """Runs `fetch` once with a software trace; its summary (trace_summary).

  Writes the step's RunMetadata, partition graphs included, gzipped to
  `path`, for `bench/trace_summary.py` or TensorBoard's profiler to read
  later (on another machine: a GPU lease brings the file back).
  """
  options = tf1.RunOptions(trace_level=tf1.RunOptions.SOFTWARE_TRACE,
                           output_partition_graphs=True)
  meta = tf1.RunMetadata()
  session.run(fetch, options=options, run_metadata=meta)
  trace_summary.write(meta, path)
  return trace_summary.summarize(meta, top)


def pin_controller(decisions, indices):
  """Assign ops that make the controller sample `indices` with certainty."""
  peaked = [np.eye(d.num_choices)[indices[d.index]] * _PEAK
            for d in decisions]
  variables = controller.create_logits(decisions,
                                       scope=search.CONTROLLER_SCOPE)
  return tf.group([variables[n].assign(values) for n, values in
                   controller.grouped_values(decisions, peaked).items()])


def _validate_after_update(config, plan, masked_spec, batch, training):
  """Step 3 run after the step's update (the model_fn's `validate_fn`).

  The pass still reads the pre-update weights, so the step computes the
  same values; only the overlap is gone.
  """
  with tf.control_dependencies([training.train_op]):
    return step_lib.validate(config, plan, masked_spec, batch, training)


def _plan(config):
  """The plan a search on this machine resolves `config` to."""
  return plan_lib.resolve(config, plan_lib.Environment(
      has_gpu=bool(tf.config.list_physical_devices('GPU'))))


def search_step(config, spec, indices, rng, overlap: bool = True):
  """Session and train op of the real model_fn, pinned to `indices`."""
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    features, labels = _batch(config, rng)
    model_fn = search.make_model_fn(
        config, _plan(config), spec,
        validate_fn=None if overlap else _validate_after_update)
    est_spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {})
    _, packed = est_spec.host_call[1]
    pin = pin_controller(schema.decisions(spec), indices)
    session = session_for(graph)
    session.run(tf1.global_variables_initializer())
    session.run(pin)
  return session, [est_spec.train_op, packed]


def overhead_only(config, spec, rng):
  """Controller sampling, cost model, reward, baseline, controller update and
  summary packing, without the network."""
  graph = tf.Graph()
  # Placed as in the search step (`controller_placement`).
  with graph.as_default(), placement.host_scope(
      _plan(config).controller_on_host):
    decisions = schema.decisions(spec)
    step = tf1.train.get_or_create_global_step()
    groups = controller.create_logits(decisions)
    variables = list(groups.values())
    logits = controller.decision_logits(decisions, groups)
    sample = controller.sample(decisions, logits, increase_ops_prob=0.0,
                               increase_filters_prob=0.0)
    masked = schema.with_masks(spec, sample.masks)
    context = cost_models.CostContext(config.cost_model_space,
                                      config.image_size, config.num_classes, 3)
    cost = cost_models.get(config.cost_model).tf_cost(masked, context)
    terms = rewards.REGISTRY.get(config.rl_reward_function)(
        tf.constant(0.5), cost, config.rl_cost_model_target,
        config.rl_cost_model_exponent)
    baseline = rewards.ema_baseline(terms.reward)
    loss = rewards.reinforce_loss(sample.log_prob, terms.reward - baseline,
                                  sample.entropy)
    train = controller_adam.apply_adam(
        list(zip(tf.gradients(loss, variables), variables)), 1e-3,
        tf.identity,
        global_step=step)
    scalars = search.logit_summaries(decisions, logits)
    scalars.update({'reward': terms.reward, 'cost': cost})
    _, packed = host_call.pack_summaries(scalars)
    session = session_for(graph)
    session.run(tf1.global_variables_initializer())
  return session, [train, packed]


def new_architectures(search, spec, seeds, steps: int):
  """Mean first step on architectures the session has not run, and repeated.

  A search samples a new architecture each step; at sampled widths its
  tensors then change shape from step to step, and the CPU's oneDNN kernels
  prepare each shape they have not seen. The pinned measurements above
  never pay that.

  Args:
    search: (session, fetch) of a search step (`search_step`).
    spec: the search space's spec.
    seeds: one architecture (`architecture.random_indices`) per seed.
    steps: repeated runs per architecture.

  Returns:
    (first, repeated): over the architectures, the mean of each one's first
    step, and the mean of each one's median step over `steps` runs after it.
  """
  session, fetch = search
  with session.graph.as_default():
    pins = [pin_controller(schema.decisions(spec), list(
        architecture.random_indices(spec, np.random.default_rng(seed))))
            for seed in seeds]

  def timed(pin):
    session.run(pin)
    start = time.perf_counter()
    session.run(fetch)
    return time.perf_counter() - start
  first, repeated = [], []
  for pin in pins:
    first.append(timed(pin))
    repeated.append(np.median([timed(pin) for _ in range(steps)]))
  return float(np.mean(first)), float(np.mean(repeated))


def supernet_update(search_session):
  """An RMSProp update of zero gradients over the supernet's weight shapes."""
  shapes = [v.shape for v in search_session.graph.get_collection(
      tf1.GraphKeys.TRAINABLE_VARIABLES)
            if not v.name.startswith(search.CONTROLLER_SCOPE + '/')]
  graph = tf.Graph()
  with graph.as_default():
    variables = [tf1.get_variable(f'w{i}', shape, tf.float32,
                                  tf1.zeros_initializer())
                 for i, shape in enumerate(shapes)]
    gradients = [tf1.placeholder_with_default(tf.zeros(shape), shape)
                 for shape in shapes]
    update = tf1.train.RMSPropOptimizer(
        0.01, decay=0.9, momentum=0.9, epsilon=1.0).apply_gradients(
            zip(gradients, variables))
    session = session_for(graph)
    session.run(tf1.global_variables_initializer())
  return session, update


def parts(config, spec, indices, rng, widest: bool):
  """Stand-alone training step + validation inference of `indices`.

  `widest`: at the largest width of every searched width (what the masked
  form computes), else at the architecture's own widths.
  """
  if widest:
    indices = [architecture.widest_index(d) if d.tag == schema.FILTERS else i
               for d, i in zip(schema.decisions(spec), indices)]
  fixed = architecture.with_indices(spec, indices)
  graph = tf.Graph()
  with graph.as_default():
    features, labels = _batch(config, rng)
    # Trained as the search trains the supernet: batch statistics.
    form = supernet.forms.standalone(is_training=True, batch_norm_mode='batch')
    logits = supernet.build_network(
        fixed, features['train_images'], config.num_classes, form)
    loss = tf1.losses.softmax_cross_entropy(
        tf.one_hot(labels['train_labels'], config.num_classes), logits,
        label_smoothing=config.label_smoothing)
    loss += supernet.regularization_loss(config.weight_decay)
    train = tf1.train.RMSPropOptimizer(0.01, decay=0.9, momentum=0.9,
                                       epsilon=1.0).minimize(loss)
    inference = supernet.build_network(
        fixed, features['validation_images'], config.num_classes, form)
    session = session_for(graph, search_graph=False)
    session.run(tf1.global_variables_initializer())
  return session, train, inference


# What each side builds: its timed keys (`<key>_ms` in the output).
SIDES = {
    'search': ('search',),
    'masked': ('search_masked',),
    'every_step': ('search_every_step',),
    'serialised': ('search_serialised',),
    'parts': ('train', 'inference'),
    'widest': ('train_widest', 'inference_widest'),
    'overhead': ('overhead',),
    'supernet_update': ('supernet_update',),
    'new_archs': ('new_arch_first_sampled', 'new_arch_repeated_sampled',
                  'new_arch_first_masked', 'new_arch_repeated_masked'),
}
# Sides that time another side's graph (they need it built).
_NEEDS = {'supernet_update': 'search', 'new_archs': 'search'}
# key: (numerator parts, denominator parts, digits), in output order.
RATIOS = {
    'search_vs_sampled_parts_ratio': (('search',), ('train', 'inference'), 3),
    'every_step_vs_sampled_parts_ratio': (('search_every_step',),
                                          ('train', 'inference'), 3),
    'search_vs_parts_ratio': (('search_masked',),
                              ('train_widest', 'inference_widest'), 3),
    'sampled_vs_masked_step_ratio': (('search',), ('search_masked',), 3),
    'overlap_gain': (('search_serialised',), ('search',), 3),
    'deferred_vs_every_step_ratio': (('search',), ('search_every_step',), 3),
    'overhead_share': (('overhead',), ('search',), 4),
    'new_architecture_ratio': (('new_arch_first_sampled',),
                               ('new_arch_repeated_sampled',), 3),
    'new_architecture_masked_ratio': (('new_arch_first_masked',),
                                      ('new_arch_repeated_masked',), 3),
}


def parse_sides(text: str):
  """The sides named in `text` ('all' or a comma list), in SIDES order.

  Raises:
    ValueError: naming an unknown side and the valid ones, or a side whose
      graph another side it needs is not named with it.
  """
  names = list(SIDES) if text == 'all' else [
      n.strip() for n in text.split(',') if n.strip()]
  unknown = [n for n in names if n not in SIDES]
  if unknown or not names:
    raise ValueError(f'unknown --sides {unknown or text!r}; valid: all or a '
                     f'comma list of {", ".join(SIDES)}')
  for side, needed in _NEEDS.items():
    if side in names and needed not in names:
      raise ValueError(f'--sides {side} times the {needed!r} side\'s '
                       f'graph: name {needed} too')
  return [n for n in SIDES if n in names]


def ratios(ms):
  """Every ratio of RATIOS whose parts were all timed in `ms` (ms by key)."""
  out = {}
  for key, (numerator, denominator, digits) in RATIOS.items():
    if all(k in ms for k in numerator + denominator):
      out[key] = round(sum(ms[k] for k in numerator)
                       / sum(ms[k] for k in denominator), digits)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--search_space', default='proxylessnas_search')
  parser.add_argument('--image_size', type=int, default=64)
  parser.add_argument('--batch_size', type=int, default=16)
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--arch_seed', type=int, default=1,
                      help='seed of the random architecture measured')
  parser.add_argument('--new_archs', type=int, default=6,
                      help='architectures of the new-architecture ratios')
  parser.add_argument('--sides', default='all',
                      help='what to build and time: all, or a comma list of '
                      + ', '.join(SIDES) + ' (a ratio is printed when all '
                      'its parts were timed; fewer sides build faster, e.g. '
                      'search,parts for an A/B of two versions)')
  parser.add_argument('--controller_placement', default='',
                      help='the search config\'s controller_placement (auto, '
                      'host or default; its default when not given): where '
                      'the search and overhead sides run the controller, '
                      'cost model, reward and summaries')
  parser.add_argument('--trace_dir', default='',
                      help='after timing, run each timed side once traced: '
                      'its RunMetadata goes to DIR/<key>.run_metadata.pb.gz '
                      'and its summary (bench/trace_summary.py) to the '
                      'JSON\'s "trace"')
  args = parser.parse_args()
  try:
    sides = parse_sides(args.sides)
  except ValueError as e:
    parser.error(str(e))
  if args.trace_dir:
    # Before minutes of building and timing, not after.
    try:
      os.makedirs(args.trace_dir, exist_ok=True)
    except OSError as e:
      parser.error(f'--trace_dir {args.trace_dir!r}: {e.strerror}')
  model_dir = '/tmp/tunas_search_bench_search_step'
  try:
    sampled_config = _config(args, model_dir, 'sampled')
    masked_config = _config(args, model_dir, 'masked')
  except ConfigError as e:
    parser.error(str(e))
  rng = np.random.default_rng(0)
  space = search_spaces.get(args.search_space)
  spec = space.spec()
  indices = list(architecture.random_indices(
      spec, np.random.default_rng(args.arch_seed)))
  # Every side but every_step defers (one replica off TPU).
  assert _plan(sampled_config).shared_update == plan_lib.DEFERRED
  fetches = {}
  if 'search' in sides:
    fetches['search'] = search_step(sampled_config, spec, indices, rng)
  if 'masked' in sides:
    fetches['search_masked'] = search_step(masked_config, spec, indices, rng)
  if 'every_step' in sides:
    fetches['search_every_step'] = search_step(
        _config(args, model_dir, 'sampled', 'every_step'), spec, indices, rng)
  if 'serialised' in sides:
    fetches['search_serialised'] = search_step(sampled_config, spec, indices,
                                               rng, overlap=False)
  for side, widest in (('parts', False), ('widest', True)):
    if side in sides:
      session, train, inference = parts(sampled_config, spec, indices, rng,
                                        widest=widest)
      for key, fetch in zip(SIDES[side], (train, inference)):
        fetches[key] = (session, fetch)
  if 'overhead' in sides:
    fetches['overhead'] = overhead_only(sampled_config, spec, rng)
  if 'supernet_update' in sides:
    fetches['supernet_update'] = supernet_update(fetches['search'][0])
  # Interleave the measurements so machine noise hits every side alike.
  measured = {k: [] for k in fetches}
  for _ in range(args.repeats):
    for key, (session, fetch) in fetches.items():
      measured[key].append(_time(session, fetch, args.steps))
  # The fastest repeat of each side: noise on a shared machine only adds.
  ms = {k: 1000 * float(np.min(v)) for k, v in measured.items()}
  traces = {}
  if args.trace_dir:
    # Before new_archs, which pins other architectures.
    for key, (session, fetch) in fetches.items():
      traces[key] = trace(session, fetch, os.path.join(
          args.trace_dir, f'{key}.run_metadata.pb.gz'))
  seeds = [args.arch_seed + 1 + i for i in range(args.new_archs)]
  if 'new_archs' in sides and seeds:
    for key, name in (('search', 'sampled'), ('search_masked', 'masked')):
      if key in fetches:
        first, repeated = new_architectures(fetches[key], spec, seeds,
                                            args.steps)
        ms[f'new_arch_first_{name}'] = 1000 * first
        ms[f'new_arch_repeated_{name}'] = 1000 * repeated
  config = sampled_config
  print(json.dumps({
      'benchmark': 'search_step',
      'search_space': args.search_space,
      'image_size': args.image_size,
      'train_batch_size': args.batch_size,
      'validation_batch_size': config.validation_batch_size,
      'architecture': architecture.format_indices(indices),
      'sides': sides,
      'controller_placement': config.controller_placement,
      'controller_on_host': _plan(config).controller_on_host,
      'code': CODE,
      **{f'{k}_ms': round(v, 2) for k, v in ms.items()},
      **ratios(ms),
      **({'trace_dir': args.trace_dir, 'trace': traces} if traces else {}),
  }, indent=2))


if __name__ == '__main__':
  main()
