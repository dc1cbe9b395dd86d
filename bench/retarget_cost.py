#!/usr/bin/env python3
"""A retarget's controller step against a search step; prints one JSON object.

  .venv/bin/python bench/retarget_cost.py [--search_space=proxylessnas_search]

In one process on one machine: a search of `--steps` steps on the embedded
data, then retargets of it (docs/retarget.md), each `--steps` steps, every
run through the real runner and model_fn (`runner.run_search`,
`retarget.run_retarget`): to the first of `--targets` at the search's
validation batch and at `--small_multiplier` times the training batch, and
to every target of `--targets` in one run.

Keys:
  retarget_vs_search_step_ratio: median step time of a one-target retarget
    / median step time of the search; issue 58 asked for <= 1/3.
  multi_target_vs_search_step_ratio: the same for the retarget to every
    target of --targets in one run.
  small_batch_retarget_vs_search_step_ratio: the one-target retarget at a
    validation batch of --small_multiplier x the training batch.
  search_step_ms, retarget_step_ms, multi_target_step_ms,
    small_batch_retarget_step_ms: medians of
    the step times after the first --skip steps (graph warm-up).
  decomposition_ms: the search step split by a linear fit of the two
    one-target retargets (step = rest + M x v, for validation batch
    multiplier M): validation_per_multiplier (v: the validation forward
    pass on one training batch's worth of images), validation_at_search
    (the search's M x v), rest_of_retarget (rest: the controller's update,
    sampling, input and host work) and training_and_update (the search step
    less its validation pass and that rest).
  search_settle_step, retarget_settle_step: the first logged step after
    which the controller's argmax architecture never changes again (logits
    read from every checkpoint, saved every --settle_every steps); null if
    it still changes at the last. For the search the controller learns only
    after its RL delay (search_rl_delay_steps); the retarget from step 0.
  The run's settings: benchmark, search_space, image_size,
    train_batch_size, validation_batch_size, steps, targets, cost_model.
"""

import json
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow as tf

import search_spaces
from tunas_search import data
from tunas_search.config import SearchConfig
from tunas_search.controller import policy as controller
from tunas_search.results import analysis
from tunas_search.search import retarget
from tunas_search.search import runner
from tunas_search.space import architecture
from tunas_search.space import schema

tf1 = tf.compat.v1
FLAGS = flags.FLAGS
flags.DEFINE_string('search_space', 'proxylessnas_search', 'Search space.')
flags.DEFINE_integer('image_size', 64, 'Input resolution.')
flags.DEFINE_integer('train_batch_size', 16, 'Training batch.')
flags.DEFINE_integer('steps', 60, 'Steps of each run.')
flags.DEFINE_integer('rl_batch_size_multiplier', 4, 'Validation batch of the '
                     'search and retargets / training batch (TuNAS: 4).')
flags.DEFINE_integer('small_multiplier', 1, 'Validation batch multiplier of '
                     'the small-batch retarget.')
flags.DEFINE_integer('skip', 10, 'First steps of each run left out of the '
                     'median (graph warm-up).')
flags.DEFINE_integer('settle_every', 5, 'Checkpoint interval of the '
                     'settling measure.')
flags.DEFINE_float('search_target', 84.0, 'Cost target of the search.')
flags.DEFINE_list('targets', ['60', '84', '110'], 'Targets of the '
                  'multi-target retarget; the one-target retarget uses the '
                  'first.')
flags.DEFINE_string('work_dir', None, 'Where the runs go (default: a '
                    'temporary directory, removed).')


class StepTimes(tf1.train.SessionRunHook):
  """Wall time of every session run (one step off TPU)."""

  def __init__(self):
    self.times = []

  def before_run(self, run_context):
    self._began = time.perf_counter()

  def after_run(self, run_context, run_values):
    self.times.append(time.perf_counter() - self._began)


def _median_ms(hook: StepTimes) -> float:
  return 1000 * statistics.median(hook.times[FLAGS.skip:] or hook.times)


settle_step = analysis.settle_step


def _settle_step(model_dir: str, spec, k: int = 0):
  """`settle_step` of the argmax read from every checkpoint of a run."""
  decisions = schema.decisions(spec)
  history = []
  for step, prefix in sorted(analysis.checkpoint_steps(model_dir).items()):
    logits = retarget.final_logits(model_dir, decisions, k, prefix)
    history.append((step, architecture.canonicalize(
        spec, controller.argmax_indices(logits))))
  return settle_step(history)


def _search_config(model_dir: str) -> SearchConfig:
  space = search_spaces.get(FLAGS.search_space)
  info = data.get_info('embedded', None)
  return SearchConfig(
      search_space=space.name, model_dir=model_dir,
      num_classes=info.num_classes, num_train_examples=info.num_train,
      dataset='embedded', image_size=FLAGS.image_size,
      input_channels=info.channels,
      train_batch_size=FLAGS.train_batch_size, max_steps=FLAGS.steps,
      rl_batch_size_multiplier=float(FLAGS.rl_batch_size_multiplier),
      cost_model=space.cost_model,
      cost_model_space=space.pixel1_model or space.cost_model_space,
      rl_cost_model_target=FLAGS.search_target,
      save_checkpoints_steps=FLAGS.settle_every,
      tpu_iterations_per_loop=FLAGS.settle_every, keep_checkpoint_max=0,
      seed=0)


def _retarget(source, model_dir, targets, hooks, **overrides):
  config = retarget.make_config(source, model_dir, targets,
                                max_steps=FLAGS.steps, **overrides)
  retarget.run_retarget(config, source, targets, hooks=hooks)


def measure(work_dir: str) -> dict:
  space = search_spaces.get(FLAGS.search_space)
  targets = [float(t) for t in FLAGS.targets]
  config = _search_config(os.path.join(work_dir, 'search'))
  names = ('search', 'retarget', 'small', 'multi')
  hooks = {name: StepTimes() for name in names}
  runner.run_search(config, space.spec(), hooks=[hooks['search']])
  source = retarget.read_source(config.model_dir)
  one = targets[:1]
  _retarget(source, os.path.join(work_dir, 'retarget'), one,
            [hooks['retarget']])
  _retarget(source, os.path.join(work_dir, 'small'), one, [hooks['small']],
            rl_batch_size_multiplier=float(FLAGS.small_multiplier))
  _retarget(source, os.path.join(work_dir, 'multi'), targets,
            [hooks['multi']])
  ms = {name: _median_ms(hooks[name]) for name in names}
  big, small = FLAGS.rl_batch_size_multiplier, FLAGS.small_multiplier
  per_multiplier = (ms['retarget'] - ms['small']) / (big - small)
  rest = ms['retarget'] - big * per_multiplier
  return {
      'benchmark': 'retarget_cost',
      'retarget_vs_search_step_ratio': ms['retarget'] / ms['search'],
      'multi_target_vs_search_step_ratio': ms['multi'] / ms['search'],
      'small_batch_retarget_vs_search_step_ratio':
          ms['small'] / ms['search'],
      'search_step_ms': ms['search'],
      'retarget_step_ms': ms['retarget'],
      'multi_target_step_ms': ms['multi'],
      'small_batch_retarget_step_ms': ms['small'],
      'decomposition_ms': {
          'validation_per_multiplier': per_multiplier,
          'validation_at_search': big * per_multiplier,
          'rest_of_retarget': rest,
          'training_and_update': ms['search'] - big * per_multiplier - rest,
      },
      'search_settle_step': _settle_step(config.model_dir, source.spec),
      'search_rl_delay_steps': config.fraction_steps(
          config.rl_delay_steps_fraction),
      'retarget_settle_step': _settle_step(
          os.path.join(work_dir, 'retarget'), source.spec),
      'search_space': space.name, 'image_size': FLAGS.image_size,
      'train_batch_size': config.train_batch_size,
      'validation_batch_size': config.validation_batch_size,
      'small_validation_batch_size': small * config.train_batch_size,
      'steps': FLAGS.steps, 'skip': FLAGS.skip, 'targets': targets,
      'cost_model': config.cost_model,
  }


def main(argv):
  del argv
  if FLAGS.work_dir:
    result = measure(FLAGS.work_dir)
  else:
    with tempfile.TemporaryDirectory() as work_dir:
      result = measure(work_dir)
  print(json.dumps(result, indent=2))


if __name__ == '__main__':
  app.run(main)
