#!/usr/bin/env python3
"""How many steps a retarget's controllers take to settle, against the search's.

  .venv/bin/python bench/retarget_settle.py --source_dir=SEARCH_DIR \
      --work_dir=NEW_DIR [--targets=60,84,110] [--steps=N]

Retargets a finished search (only read) to `--targets` in one run of
`--steps` steps (default: the search's own number) into `--work_dir/retarget`,
then reads every controller's logged logits (TensorBoard events, every host
loop) and prints one JSON object.

Keys:
  search_settle_step: the first logged step of the source search after which
    its controller's argmax architecture never changes again; null if it
    still changes at the last logged step. Its controller learns only after
    its RL delay (search_rl_delay_steps).
  retarget_settle_steps: the same, per target, for the retarget (which
    learns from step 0).
  search_window_step, retarget_window_steps: the first logged step after
    which the argmax architecture's cost stays in its target's window
    (`selection.window`, +-1.2%); null if it leaves it at the last.
  search_argmax_changes_by_quarter, retarget_argmax_changes_by_quarter: how
    many logged steps in each quarter of the run changed the argmax
    architecture (a controller flipping between near-tied choices never
    settles exactly).
  search_steps, retarget_steps, log_every_steps: the runs' lengths and the
    logging interval (the settle steps' resolution) of each.
  retarget_final_costs, retarget_in_window: per target, the cost of the
    retarget's final architecture and whether it lies in the target's
    window (search_result.json's rule; only the first target's is written
    to search_result.json, the others are computed the same way).
  retarget_wall_s: the retarget's wall time, graph building included.
Run the same command again to read a finished retarget without running it:
retarget_wall_s, which only a run records, is then null.
"""

import json
import os
import sys
import time

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags

from tunas_search import cost_models
from tunas_search.controller import policy as controller
from tunas_search.results import analysis
from tunas_search.results import selection
from tunas_search.search import retarget
from tunas_search.space import schema

FLAGS = flags.FLAGS


def define_flags():
  """Defines the flags; in `__main__` only, so that a test can load this
  script beside bench/retarget_cost.py, whose flags share some names."""
  flags.DEFINE_string('source_dir', None, 'A finished search (only read).')
  flags.DEFINE_string('work_dir', None, 'Where the retarget goes (new).')
  flags.DEFINE_list('targets', ['60', '84', '110'], 'The retarget\'s targets.')
  flags.DEFINE_integer('steps', None, 'Steps of the retarget (default: the '
                       'search\'s).')
  flags.DEFINE_float('rl_batch_size_multiplier', None, 'Validation batch of '
                     'the retarget, in training batches (default: the '
                     'retarget\'s default).')
  flags.mark_flags_as_required(['source_dir', 'work_dir'])


def _settle(scalars, spec, prefix=''):
  return analysis.settle_step(analysis.logged_architectures(scalars, spec,
                                                            prefix))


def _window_step(history, spec, config, target):
  """`analysis.settle_step` of whether the argmax's cost is in the window."""
  model = cost_models.get(config.cost_model)
  context = cost_models.context_for(config)
  low, high = selection.window(target)
  inside = [(step, low <= model.cost(spec, arch, context) <= high)
            for step, arch in history]
  if not inside or not inside[-1][1]:
    return None
  first = len(inside) - 1
  while first > 0 and inside[first - 1][1]:
    first -= 1
  return inside[first][0]


def _changes_by_quarter(history):
  changed = [a != b for (_, a), (_, b) in zip(history, history[1:])]
  size = max(1, -(-len(changed) // 4))
  return [sum(changed[q * size:(q + 1) * size]) for q in range(4)]


def overrides(steps, rl_batch_size_multiplier) -> dict:
  """The retarget config fields the flags set (unset: the default's)."""
  out = {} if steps is None else {'max_steps': steps}
  if rl_batch_size_multiplier is not None:
    out['rl_batch_size_multiplier'] = rl_batch_size_multiplier
  return out


def measure() -> dict:
  source = retarget.read_source(FLAGS.source_dir)
  targets = [float(t) for t in FLAGS.targets]
  model_dir = os.path.join(FLAGS.work_dir, 'retarget')
  config = retarget.make_config(
      source, model_dir, targets,
      **overrides(FLAGS.steps, FLAGS.rl_batch_size_multiplier))
  wall = None
  if not os.path.exists(os.path.join(model_dir, retarget.RESULT_FILENAME)):
    began = time.perf_counter()
    retarget.run_retarget(config, source, targets)
    wall = time.perf_counter() - began
  search_scalars = analysis.read_scalars(source.model_dir)
  scalars = analysis.read_scalars(model_dir, prefixes=('rl', 'retarget'))
  decisions = schema.decisions(source.spec)
  costs, in_window = [], []
  for k, target in enumerate(targets):
    # The rule of search_result.json (and of the front).
    choice = selection.Distribution(
        source.spec, controller.probabilities(
            retarget.final_logits(model_dir, decisions, k)),
        cost_model=cost_models.get(config.cost_model),
        context=cost_models.context_for(config), target=target,
    ).choose(selection.AUTO)
    costs.append(choice.cost)
    in_window.append(choice.in_window)
  count = len(targets)
  search_history = analysis.logged_architectures(search_scalars, source.spec)
  histories = [analysis.logged_architectures(
      scalars, source.spec, retarget.summary_prefix(k)) for k in range(count)]
  return {
      'benchmark': 'retarget_settle',
      'search_settle_step': _settle(search_scalars, source.spec),
      'search_rl_delay_steps': source.config.fraction_steps(
          source.config.rl_delay_steps_fraction),
      'retarget_settle_steps': [
          _settle(scalars, source.spec, retarget.summary_prefix(k))
          for k in range(count)],
      'search_window_step': _window_step(
          search_history, source.spec, source.config,
          source.config.rl_cost_model_target),
      'retarget_window_steps': [
          _window_step(h, source.spec, config, t)
          for h, t in zip(histories, targets)],
      'search_argmax_changes_by_quarter': _changes_by_quarter(search_history),
      'retarget_argmax_changes_by_quarter': [
          _changes_by_quarter(h) for h in histories],
      'search_steps': source.config.total_steps,
      'retarget_steps': config.total_steps,
      'log_every_steps': {'search': source.config.tpu_iterations_per_loop,
                          'retarget': config.tpu_iterations_per_loop},
      'retarget_final_costs': costs,
      'retarget_in_window': in_window,
      'retarget_wall_s': wall,
      'source_dir': os.path.abspath(source.model_dir),
      'search_space': source.config.search_space,
      'targets': targets,
      'rl_batch_size_multiplier': config.rl_batch_size_multiplier,
      'source_target': source.config.rl_cost_model_target,
      'cost_model': config.cost_model,
  }


def main(argv):
  del argv
  print(json.dumps(measure(), indent=2))


if __name__ == '__main__':
  define_flags()
  app.run(main)
