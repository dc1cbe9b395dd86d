"""Training-step cost of the supernet against stand-alone nets; prints JSON.

Ratios (docs/method.md section 4: unselected ops are not computed):
  * supernet_vs_standalone_ratio: a supernet step in the masked form
    (`supernet_widths=masked`) with one sampled path over a stand-alone step
    of the same ops at the widest widths (target <= 1.10);
  * sampled_supernet_vs_standalone_ratio: a supernet step computing at the
    sampled widths (`supernet_widths=sampled`) over a stand-alone step of
    the architecture at its own widths (target <= 1.10);
  * op_choices_7_vs_1_ratio: a small tower whose op decisions have 7 choices
    over the same tower with 1 choice, choice 0 selected (target <= 1.05);
    `_every_step_ratio`: the same with every weight updated every step
    (TuNAS's optimiser, `unused_weight_steps=every_step`, zero gradients for
    unused weights),
    with `op_choices_breakdown`: per choice count, the forward pass, the
    backward pass (forward + gradients - forward; the gradients are reduced
    to one scalar so that none is pruned), the weight update (step -
    forward - backward) and the graph's op count, to show where the growth
    comes from; and for 7 choices `unselected_weights_ms`, the step minus
    the same step differentiating and updating only the sampled path's
    weights with plain RMSProp: what the unselected ops' weights cost (their
    deferred update's bookkeeping, and with every_step their zero gradients
    and RMSProp updates). The rest of the growth is the conds themselves.

Every supernet step uses the deferred update (one replica off TPU): RMSProp
with momentum whose steps of the weights a step leaves unused are deferred
(`unused_weight_steps=deferred`, docs/method.md section 6), their gradients
dead, not zero, as in such a search; `_every_step` towers update every
weight every step, as TuNAS (and a search on TPU or several replicas). Every supernet step also checks that its
loss and gradients are finite and waits at the gradient-sync barrier, as the
search's step does by default (stand-alone steps skip them, as stand-alone
training does).

Keys (times in ms per step, each config's fastest round):
  * the ratios above;
  * op_choices_breakdown: {"1": {...}, "7": {...}} with forward_ms,
    backward_ms, update_ms and graph_ops (the op count of that network's
    graph), and in "7" also unselected_weights_ms;
  * <network>_ms, one training step of each network measured:
    supernet_ms (masked form, sampled path), supernet_sampled_ms (sampled
    widths), standalone_widest_ms (the sampled ops at their widest widths),
    standalone_ms (the architecture at its own widths), op_choices_1_ms,
    op_choices_3_ms and op_choices_7_ms (the small tower with 1, 3 and 7
    op choices; the 3-choice tower enters no ratio),
    op_choices_7_sampled_path_only_ms (7 choices, only the sampled path's
    weights differentiated and updated), op_choices_1_every_step_ms and
    op_choices_7_every_step_ms (every weight updated every step);
  * op_choices_instances_ms: for each op-choice tower, the fastest round
    of each of its --instances builds, in build order;
  * op_choices_7_vs_1_round_ratios and
    op_choices_7_vs_1_every_step_round_ratios: each round's ratio, whose
    median is the op ratio (below);
  * op_choices_by_op_type (--traced_steps N, default 6; 0 leaves it out):
    where the 7-choice tower's extra time goes, by op type. After the
    timings, N steps of each deferred tower's fastest build run with a
    software trace (bench/trace_summary.py), alternating; for the 12 op
    types whose median time in a step grew most: op, ms_1 and ms_7 (the
    median host time of that type's ops in a step; tracing slows every op,
    so they add up to more than the timed steps), ops_1 and ops_7 (how many
    ran);
  * the run's settings: space, architecture (the random architecture drawn
    with --seed, as an architecture string), image_size, batch, steps,
    rounds, tower_rounds, instances, op_towers_only, traced_steps.
Every session is configured as the search's (`estimators.session_config` with
`search_graph`: the supernets and towers) or stand-alone training's is
(the stand-alone nets).
The supernets' masks are fed, as the search's sampled masks are computed:
constant masks would let Grappler fold the conds and the growth would look
smaller than a search's.
Every network is built in its own graph in this process; measurements are
interleaved over several rounds and each config keeps its fastest round.
Each op-choice tower is built --instances times (default 6; each in its
own graph and session) and keeps the fastest instance: one build of a
tower can run several percent slower than another of the same graph, in
this process or the next, and with one build the ratio moves with it.
`op_choices_instances_ms` lists every build's fastest round, so the spread
is in the output.
The two op ratios are paired by round: the towers are timed in
--tower_rounds rounds, each round times build i of every tower back to
back (the order reversed every other round), and a round's ratio divides
the fastest 7-choice build by the fastest 1-choice build of that round; the
ratio is the median over rounds (`op_choices_7_vs_1_round_ratios` lists
them). The machine's speed drifts by several percent over a run, and a
ratio of each tower's fastest round over the whole run would mix moments.
The `*_ms` keys stay each tower's fastest round.
With --op_towers_only it builds and times only the four towers of the two
op ratios (1 and 7 choices, deferred and every step) and prints those keys
and the settings.

  python bench/step_cost.py --image_size 64 --batch 32 --steps 10
  python bench/step_cost.py --image_size 28 --batch 64 --op_towers_only
"""

import argparse
import contextlib
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # pylint: disable=g-import-not-at-top

# trace_summary.py beside this script (on the path when it runs as one).
_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
  sys.path.append(_BENCH)
import search_spaces  # pylint: disable=g-import-not-at-top
import trace_summary  # pylint: disable=g-import-not-at-top
from tunas_search.space import architecture  # pylint: disable=g-import-not-at-top
from tunas_search.space import schema  # pylint: disable=g-import-not-at-top
from tunas_search.space import specs  # pylint: disable=g-import-not-at-top
from tunas_search.search import nonfinite  # pylint: disable=g-import-not-at-top
from tunas_search.search import shared_update  # pylint: disable=g-import-not-at-top
from tunas_search import supernet as supernet_lib  # pylint: disable=g-import-not-at-top
from tunas_search.runtime import estimators  # pylint: disable=g-import-not-at-top
from tunas_search.space.schema import OneOf  # pylint: disable=g-import-not-at-top
from tunas_search.supernet import build_network  # pylint: disable=g-import-not-at-top

NUM_CLASSES = 10
# The search step's finite check, zeroing of non-finite gradients and
# gradient-sync barrier, taken from the search itself so that a supernet
# step here is built as the search builds it.
_ALL_FINITE = nonfinite.all_finite
_FINITE_OR_ZERO = nonfinite.finite_or_zero
_AFTER = shared_update.after
# (kernel, expansion) of the op choices of the op-count benchmark.
OP_CHOICES = ((3, 3.0), (5, 3.0), (7, 3.0), (3, 6.0), (5, 6.0), (7, 6.0),
              (5, 4.0))


def op_tower(num_choices: int) -> specs.ConvTower:
  """A stem and four bottleneck layers whose op decisions have n choices."""
  def layer(strides):
    return OneOf([specs.DepthwiseBottleneck(k, specs.FilterMultiplier(e),
                                            strides=strides)
                  for k, e in OP_CHOICES[:num_choices]], schema.OP)
  return specs.ConvTower((
      specs.Block((specs.Conv(3, strides=2), specs.Activation('relu')), 16),
      specs.Block((layer(2), specs.Residual(layer(1)),
                   specs.Residual(layer(1))), 32),
      specs.Block((layer(2), specs.Residual(layer(1))), 48),
  ))


def widest_filters(spec: Any, indices: Sequence[int]) -> List[int]:
  """`indices` with every filters decision set to its widest choice."""
  out = list(indices)
  for d in schema.decisions(spec):
    if d.tag == schema.FILTERS:
      sizes = [c.scale if isinstance(c, specs.FilterMultiplier) else c
               for c in d.oneof.choices]
      out[d.index] = int(np.argmax(sizes))
  return out


def _on_path(name: str, indices: Sequence[int]) -> bool:
  """Whether an `op_tower` variable belongs to the sampled path.

  Every op decision of the tower selects the same index; a variable under
  `choices/<j>` for another j belongs to an unselected op.
  """
  return all(int(j) == indices[0]
             for j in re.findall(r'/choices/(\d+)/', name))


class Step:
  """One network in its own graph and session, with an RMSProp step."""

  def __init__(self, spec, indices, supernet: bool, args,
               width_form: str = 'masked', sampled_path_only: bool = False,
               deferred: bool = False):
    self.graph = tf.Graph()
    with self.graph.as_default(), contextlib.ExitStack() as stack:
      # Deferred: the search's update with unused weights' steps deferred
      # (`unused_weight_steps=deferred`), which reads snapshots.
      snapshots = {}
      uses = supernet_lib.WeightUses() if deferred else None
      if deferred:
        stack.enter_context(supernet_lib.reading_snapshots(snapshots))
      decisions = schema.decisions(spec)
      if supernet:
        # Fed, not constant: the search computes its masks from a sample.
        masks = [tf.compat.v1.placeholder_with_default(
            np.eye(d.num_choices, dtype=np.float32)[i], [d.num_choices])
                 for d, i in zip(decisions, indices)]
        spec = schema.with_masks(spec, masks)
        # The search's training pass (`shared_update`).
        form = (supernet_lib.forms.deferred(width_form) if deferred
                else supernet_lib.forms.every_step(width_form))
      else:
        spec = architecture.with_indices(spec, indices)
        form = supernet_lib.forms.standalone(is_training=True)
      rng = np.random.default_rng(0)
      images = tf.constant(rng.normal(size=(
          args.batch, args.image_size, args.image_size, 3)).astype('f4'))
      labels = tf.constant(rng.integers(NUM_CLASSES, size=args.batch))
      logits = build_network(spec, images, NUM_CLASSES, form, uses=uses)
      stack.close()
      loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
      updates = tf.compat.v1.get_collection(
          tf.compat.v1.GraphKeys.UPDATE_OPS)
      # The search's optimiser (docs/method.md section 6).
      optimizer = tf.compat.v1.train.RMSPropOptimizer(
          1e-3, decay=0.9, momentum=0.9, epsilon=1.0)
      # Ungated, as the search computes them (shared_update.EveryStepUpdate.step).
      variables = tf.compat.v1.trainable_variables()
      if sampled_path_only:
        variables = [v for v in variables if _on_path(v.name, indices)]
      if deferred:
        step = tf.compat.v1.train.get_or_create_global_step()
        deferred_rmsprop = supernet_lib.DeferredRMSProp(
            variables, uses, snapshots, step.read_value(), 1e-3, decay=0.9,
            momentum=0.9, epsilon=1.0)
        # Dead for unused weights, as the search computes them.
        grads_and_vars = list(zip(deferred_rmsprop.gradients(loss, variables),
                                  variables))
        # Live every step, unlike the gradients of unused weights.
        norms = deferred_rmsprop.gradient_norms(grads_and_vars)
        # The search's finite check and gradient-sync barrier (on by
        # default), as shared_update's step builds them.
        finite = _ALL_FINITE(loss, half_squared_norms=norms)
        grads_and_vars = _AFTER(grads_and_vars, norms)
        update = deferred_rmsprop.apply_gradients(grads_and_vars, finite)
        with tf.control_dependencies([update]):
          self.train_op = step.assign_add(1).op
        gradients = tf.add_n(norms)
      else:
        grads_and_vars = optimizer.compute_gradients(
            loss, var_list=variables,
            gate_gradients=tf.compat.v1.train.Optimizer.GATE_NONE)
        if supernet:
          # The search's finite check, zeroing and gradient-sync barrier
          # for TuNAS's every-step update (shared_update.EveryStepUpdate.step).
          finite = _ALL_FINITE(loss, grads_and_vars)
          grads_and_vars = _FINITE_OR_ZERO(grads_and_vars, finite)
          grads_and_vars = _AFTER(
              grads_and_vars, [g for g, _ in grads_and_vars if g is not None])
        with tf.control_dependencies(updates):
          self.train_op = optimizer.apply_gradients(grads_and_vars)
        gradients = tf.add_n([tf.reduce_sum(g) for g, _ in grads_and_vars
                              if g is not None])
      self.fetches = {
          'forward': loss,
          # One scalar that needs every gradient: fetching the gradients
          # would time their copy out, and Grappler prunes a bare group.
          'gradients': gradients,
          'step': self.train_op}
      self.num_ops = len(self.graph.get_operations())
      # As the search (supernet steps) or stand-alone training configures
      # its session.
      self.session = tf.compat.v1.Session(
          graph=self.graph, config=estimators.session_config(
              has_gpu=bool(tf.config.list_physical_devices('GPU')),
              search_graph=supernet))
      self.session.run(tf.compat.v1.global_variables_initializer())
      # Warm-up: each fetch's first run optimises its graph.
      for fetch in ('step', 'gradients', 'forward'):
        self.session.run(self.fetches[fetch])

  def traced_ops(self) -> Dict[str, Tuple[float, int]]:
    """One step run with a software trace: op type -> (ms, ops run)."""
    options = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.SOFTWARE_TRACE,
        output_partition_graphs=True)
    meta = tf.compat.v1.RunMetadata()
    self.session.run(self.fetches['step'], options=options, run_metadata=meta)
    out: Dict[str, Tuple[float, int]] = {}
    for r in trace_summary.records(meta):
      ms, count = out.get(r.op, (0.0, 0))
      out[r.op] = (ms + (r.end - r.start) / 1e6, count + 1)
    return out

  def time_ms(self, steps: int, fetch: str = 'step') -> float:
    start = time.perf_counter()
    for _ in range(steps):
      self.session.run(self.fetches[fetch])
    return (time.perf_counter() - start) / steps * 1000


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]
                 ) -> Tuple[float, List[float]]:
  """The median over rounds of numerator[r] / denominator[r], and each.

  Timed in the same round, the two values share the machine's speed of
  that moment, which drifts by several percent over a run.
  """
  if len(numerator) != len(denominator) or not numerator:
    raise ValueError(f'need one value of each per round, got '
                     f'{len(numerator)} and {len(denominator)}')
  ratios = [n / d for n, d in zip(numerator, denominator)]
  return float(np.median(ratios)), ratios


def op_type_growth(fewer: Sequence[Dict[str, Tuple[float, int]]],
                   more: Sequence[Dict[str, Tuple[float, int]]],
                   top: int) -> List[Dict[str, Any]]:
  """Per op type, the traced steps' median time and ops in two towers.

  `fewer` and `more`: one `Step.traced_ops()` per traced step of each.
  Returns the `top` op types whose median time grew most, largest first
  (ties by name): op, ms_1 and ms_7 (medians over the steps, 0 where a step
  ran none), ops_1 and ops_7 (the ops run in a step, their median).
  """
  def median(traces, op, field):
    return float(np.median([t.get(op, (0.0, 0))[field] for t in traces]))
  rows = []
  for op in sorted({op for t in list(fewer) + list(more) for op in t}):
    rows.append({'op': op,
                 'ms_1': round(median(fewer, op, 0), 3),
                 'ms_7': round(median(more, op, 0), 3),
                 'ops_1': int(median(fewer, op, 1)),
                 'ops_7': int(median(more, op, 1))})
  rows.sort(key=lambda r: (-(r['ms_7'] - r['ms_1']), r['op']))
  return rows[:top]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--image_size', type=int, default=64)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--steps', type=int, default=5,
                      help='steps per timed round')
  parser.add_argument('--rounds', type=int, default=4,
                      help='interleaved rounds of the whole networks; the '
                      'fastest counts')
  parser.add_argument('--tower_rounds', type=int, default=8,
                      help='rounds of the op-choice towers; each op ratio '
                      'is the median of the rounds\' ratios')
  parser.add_argument('--instances', type=int, default=6,
                      help='builds of each op-choice tower; the fastest '
                      'counts')
  parser.add_argument('--traced_steps', type=int, default=6,
                      help='steps of the 1- and 7-choice towers run traced '
                      '(alternating) for op_choices_by_op_type; 0: none')
  parser.add_argument('--op_towers_only', action='store_true',
                      help='only the op-choice towers of the two op ratios')
  parser.add_argument('--space', default='proxylessnas_search',
                      choices=search_spaces.names())
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  for flag in ('steps', 'rounds', 'tower_rounds', 'instances'):
    if getattr(args, flag) < 1:
      parser.error(f'--{flag} must be at least 1, got {getattr(args, flag)}')
  if args.traced_steps < 0:
    parser.error(f'--traced_steps must be at least 0, got {args.traced_steps}')
  tf.compat.v1.disable_eager_execution()  # A benchmark process, not a library.

  space = search_spaces.get(args.space)
  spec = space.spec()
  indices = architecture.random_indices(spec, np.random.default_rng(args.seed))
  full = not args.op_towers_only
  networks = {}
  if full:
    networks.update({
        'supernet': Step(spec, indices, True, args, deferred=True),
        'supernet_sampled': Step(spec, indices, True, args, 'sampled',
                                 deferred=True),
        'standalone_widest': Step(spec, widest_filters(spec, indices), False,
                                  args),
        'standalone': Step(spec, indices, False, args),
    })
  # Each name's builds: one for a whole network, --instances for a tower.
  builds: Dict[str, List[Step]] = {name: [step]
                                  for name, step in networks.items()}

  def add_towers(name: str, n: int, **kwargs) -> None:
    tower = op_tower(n)
    builds[name] = [Step(tower, [0] * len(schema.decisions(tower)), True,
                         args, **kwargs) for _ in range(args.instances)]
  for n in (1, 3, 7) if full else (1, 7):
    add_towers(f'op_choices_{n}', n, deferred=True)
  if full:
    add_towers('op_choices_7_sampled_path_only', 7, sampled_path_only=True)
  for n in (1, 7):
    add_towers(f'op_choices_{n}_every_step', n)
  towers = [name for name in builds if name.startswith('op_')]
  # Each ratio's two towers next to each other, so that a round times them
  # close together; the breakdown's parts after them.
  paired = [f'op_choices_{n}{kind}' for kind in ('', '_every_step')
            for n in (1, 7)]
  tower_fetches = [(name, 'step') for name in paired]
  tower_fetches += [(name, 'step') for name in towers if name not in paired]
  if full:
    tower_fetches += [(f'op_choices_{n}', part) for n in (1, 7)
                      for part in ('forward', 'gradients')]
  best: Dict[tuple, float] = {}

  def record(name: str, i: int, fetch: str, value: float) -> None:
    best[name, i, fetch] = min(best.get((name, i, fetch), float('inf')),
                               value)
  for _ in range(args.rounds):
    for name in networks:
      record(name, 0, 'step', builds[name][0].time_ms(args.steps))
  # rounds_ms[name][r]: the fastest build of a tower's step in round r.
  rounds_ms: Dict[str, List[float]] = {name: [] for name in towers}
  for r in range(args.tower_rounds):
    order = tower_fetches if r % 2 == 0 else tower_fetches[::-1]
    this_round = {name: float('inf') for name in towers}
    for i in range(args.instances):
      for name, fetch in order:
        value = builds[name][i].time_ms(args.steps, fetch)
        record(name, i, fetch, value)
        if fetch == 'step':
          this_round[name] = min(this_round[name], value)
    for name in towers:
      rounds_ms[name].append(this_round[name])

  def fastest(name: str, fetch: str = 'step') -> float:
    return min(best[name, i, fetch] for i in range(len(builds[name])))
  ms = {name: fastest(name) for name in builds}
  instances_ms = {name: [round(best[name, i, 'step'], 3)
                         for i in range(args.instances)]
                  for name in towers}
  ratio, round_ratios = paired_ratio(rounds_ms['op_choices_7'],
                                     rounds_ms['op_choices_1'])
  every_step_ratio, every_step_round_ratios = paired_ratio(
      rounds_ms['op_choices_7_every_step'],
      rounds_ms['op_choices_1_every_step'])
  result = {
      'op_choices_7_vs_1_ratio': ratio,
      'op_choices_7_vs_1_every_step_ratio': every_step_ratio,
      'op_choices_7_vs_1_round_ratios': [round(x, 4) for x in round_ratios],
      'op_choices_7_vs_1_every_step_round_ratios':
          [round(x, 4) for x in every_step_round_ratios],
      **{f'{name}_ms': value for name, value in ms.items()},
      'op_choices_instances_ms': instances_ms,
      'image_size': args.image_size, 'batch': args.batch,
      'steps': args.steps, 'rounds': args.rounds,
      'tower_rounds': args.tower_rounds, 'instances': args.instances,
      'op_towers_only': args.op_towers_only,
  }
  if args.traced_steps:
    # After the timings, which tracing would slow: each tower's fastest
    # build, alternating.
    fastest_build = {n: min(range(args.instances), key=lambda i, n=n: best[
        f'op_choices_{n}', i, 'step']) for n in (1, 7)}
    traces = {1: [], 7: []}
    for _ in range(args.traced_steps):
      for n in (1, 7):
        traces[n].append(
            builds[f'op_choices_{n}'][fastest_build[n]].traced_ops())
    result['op_choices_by_op_type'] = op_type_growth(traces[1], traces[7],
                                                     top=12)
    result['traced_steps'] = args.traced_steps
  if full:
    breakdown = {}
    for n in (1, 7):
      name = f'op_choices_{n}'
      forward, gradients = fastest(name, 'forward'), fastest(name, 'gradients')
      breakdown[str(n)] = {
          'forward_ms': round(forward, 2),
          'backward_ms': round(gradients - forward, 2),
          'update_ms': round(ms[name] - gradients, 2),
          'graph_ops': builds[name][0].num_ops}
    breakdown['7']['unselected_weights_ms'] = round(
        ms['op_choices_7'] - ms['op_choices_7_sampled_path_only'], 2)
    result.update({
        'supernet_vs_standalone_ratio':
            ms['supernet'] / ms['standalone_widest'],
        'sampled_supernet_vs_standalone_ratio':
            ms['supernet_sampled'] / ms['standalone'],
        'op_choices_breakdown': breakdown,
        'space': args.space,
        'architecture': architecture.format_indices(indices)})
  print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == '__main__':
  main()
