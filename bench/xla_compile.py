#!/usr/bin/env python3
"""XLA compile time and peak memory of the search step; prints one JSON object.

  .venv/bin/python bench/xla_compile.py [--search_spaces=proxylessnas_search]
      [--image_size=32] [--conds=v2] [--max_blocks=3] [--plain_llvm]

Each search space runs in its own subprocess, which builds the real search
model_fn inside `xla.compile` (the way TPU compilation wraps it) and runs the
compiled step twice, with tunas_search.runtime.xla' CPU compile options unless
--plain_llvm (XLA_FLAGS, as used, is in the output).

Top-level keys: benchmark ('xla_compile'), image_size, train_batch_size,
conds, max_blocks, xla_flags, and search_spaces, which maps each space to:
  build_s: graph building, from the model_fn call to the initialiser;
  compile_s: the first run (XLA compilation plus one step) minus a step;
  step_s: the second run (one compiled step);
  graph_ops: the op count of the graph built;
  loss: the compiled step's loss (seeded weights, inputs and draws: the
    same in every run of one commit);
  peak_rss_gb: the subprocess's peak resident memory (ru_maxrss);
  timed_out: false. A subprocess that did not finish within --timeout_s
    gives only timed_out (true) and timeout_s; one that failed gives only
    failed (true), returncode and stderr_tail (its last 2,000 characters).
"""

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def _child(args) -> dict:
  """Builds, compiles and runs one space's step; returns its timings."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  import search_spaces
  from tunas_search.search import model_fn as search
  from tunas_search.config import SearchConfig
  from tunas_search.config import plan as plan_lib
  from tunas_search.tf_internals import xla
  tf1 = tf.compat.v1

  space = search_spaces.get(args.search_space)
  spec = space.spec()
  if args.max_blocks:  # The first blocks and the head.
    spec = dataclasses.replace(
        spec, blocks=spec.blocks[:args.max_blocks] + spec.blocks[-1:])
  config = SearchConfig(
      search_space=args.search_space, model_dir='/tmp/tunas_search_bench_xla',
      num_classes=10, num_train_examples=10000, image_size=args.image_size,
      input_channels=3, train_batch_size=args.batch_size, max_steps=1000,
      seed=1, cost_model_space=space.pixel1_model or space.cost_model_space,
      rl_cost_model_target=space.default_cost_target,
      # The Pixel-1 model only knows whole spaces; MAdds fits any prefix.
      cost_model='madds' if args.max_blocks else space.cost_model)
  rng = np.random.default_rng(0)
  size, b, v = (args.image_size, config.train_batch_size,
                config.validation_batch_size)
  graph = tf.Graph()
  with graph.as_default():
    # Seeded initial weights: `loss` is then comparable between runs and
    # commits (the step's own draws are seeded by `seed=1`).
    tf1.set_random_seed(0)
    inputs = [
        tf.constant(rng.normal(size=(b, size, size, 3)), tf.float32),
        tf.constant(rng.normal(size=(v, size, size, 3)), tf.float32),
        tf.constant(rng.integers(0, 10, b), tf.int32),
        tf.constant(rng.integers(0, 10, v), tf.int32)]
    # The step XLA compiles (masked widths, every weight stepped every
    # step); v1 builds it with TensorFlow's Switch/Merge conds instead of
    # functional ones.
    plan = plan_lib.resolve(config, plan_lib.Environment(xla=True))
    if args.conds == 'v1':
      plan = dataclasses.replace(plan, xla=False)
    model_fn = search.make_model_fn(config, plan, spec)

    def computation(train_images, validation_images, train_labels,
                    validation_labels):
      est = model_fn({'train_images': train_images,
                      'validation_images': validation_images},
                     {'train_labels': train_labels,
                      'validation_labels': validation_labels},
                     tf.estimator.ModeKeys.TRAIN, {})
      with tf.control_dependencies([est.train_op]):
        return tf.identity(est.loss)

    start = time.perf_counter()
    loss = xla.compile(computation, inputs)
    init = tf1.global_variables_initializer()
    build = time.perf_counter() - start
    num_ops = len(graph.get_operations())
  with tf1.Session(graph=graph) as session:
    session.run(init)
    start = time.perf_counter()
    session.run(loss)
    first = time.perf_counter() - start
    start = time.perf_counter()
    value = session.run(loss)
    step = time.perf_counter() - start
  return {'build_s': round(build, 1), 'compile_s': round(first - step, 1),
          'step_s': round(step, 2), 'graph_ops': num_ops,
          'loss': float(value[0])}


def _measure(args, name: str) -> dict:
  """Runs one space in a subprocess; adds its peak memory."""
  command = [sys.executable, os.path.abspath(__file__), '--child',
             f'--search_space={name}', f'--image_size={args.image_size}',
             f'--batch_size={args.batch_size}', f'--conds={args.conds}',
             f'--max_blocks={args.max_blocks}']
  before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  try:
    done = subprocess.run(command, capture_output=True, text=True,
                          timeout=args.timeout_s, check=False)
  except subprocess.TimeoutExpired:
    return {'timed_out': True, 'timeout_s': args.timeout_s}
  # ru_maxrss of all waited-for children is their maximum, in KiB on Linux;
  # it names this child only if it is the largest so far, so spaces go from
  # the smallest up or are measured one per invocation.
  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  if done.returncode != 0:
    return {'failed': True, 'returncode': done.returncode,
            'stderr_tail': done.stderr[-2000:]}
  result = json.loads(done.stdout.strip().splitlines()[-1])
  result['peak_rss_gb'] = round(max(peak, before) / 2**20, 2)
  result['timed_out'] = False
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--search_spaces', default='',
                      help='comma-separated; default: every search space')
  parser.add_argument('--search_space', default='', help=argparse.SUPPRESS)
  parser.add_argument('--image_size', type=int, default=32)
  parser.add_argument('--batch_size', type=int, default=2)
  parser.add_argument('--conds', choices=('v1', 'v2'), default='v2',
                      help='v2: the XLA build (functional conds); v1: '
                      'Switch/Merge conds (the graph build\'s), masked widths')
  parser.add_argument('--max_blocks', type=int, default=0,
                      help='keep only the first N blocks (and the head)')
  parser.add_argument('--plain_llvm', action='store_true',
                      help='compile without tunas_search.runtime.xla\' CPU '
                      'options (LLVM inlines every conditional branch)')
  parser.add_argument('--timeout_s', type=int, default=1800)
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(_child(args)))
    return
  import search_spaces  # pylint: disable=g-import-not-at-top
  from tunas_search.runtime import xla as runtime_xla  # pylint: disable=g-import-not-at-top
  if not args.plain_llvm:  # The children inherit it.
    runtime_xla.use_cpu_compile_options()
  names = (args.search_spaces.split(',') if args.search_spaces
           else search_spaces.search_space_names())
  print(json.dumps({
      'benchmark': 'xla_compile',
      'image_size': args.image_size,
      'train_batch_size': args.batch_size,
      'conds': args.conds,
      'max_blocks': args.max_blocks,
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
      'search_spaces': {name: _measure(args, name) for name in names},
  }, indent=2))


if __name__ == '__main__':
  main()
