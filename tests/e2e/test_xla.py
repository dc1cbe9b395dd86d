"""The search and stand-alone training steps compile and run under XLA.

On Cloud TPU, XLA compiles the whole step; these tests compile the same
model_fns on CPU with `xla.compile` (the wrapping TPU compilation applies:
the loss out, the train op as a control dependency) and check that a few
compiled steps compute what the plain CPU graph computes from the same
initial values: losses, logged scalars, sampled architectures, controller
logits and the reward baseline. The full search spaces take minutes each to
compile, so their tests are marked slow (docs/xla.md).
"""

import dataclasses
import json
import os
import sys
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
import tensorflow as tf

import search_spaces
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.search import model_fn as search
from tunas_search.runtime import xla as runtime_xla
from tunas_search.config import SearchConfig
from tunas_search.config import plan as plan_lib
from tunas_search.runtime import progress
from tunas_search.standalone import make_model_fn
from tunas_search.config.standalone import TrainEvalConfig
from tunas_search.tf_internals import xla

sys.path.insert(0, os.path.dirname(__file__))
import replicas  # pylint: disable=g-import-not-at-top,wrong-import-position
import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position

tf1 = tf.compat.v1
STEPS = 4
# XLA fuses and reorders float32 arithmetic (BN reductions, the folded mask
# scales, the optimizer's updates), so results differ from the plain graph's
# in the last few bits, and four steps of training compound that. 1e-4 is
# far above float32 rounding yet far below any real difference (a wrong
# branch, a skipped update), which moves these values by 1e-2 or more.
RTOL, ATOL = 1e-4, 1e-6


def _search_config(tmp_path, **overrides) -> SearchConfig:
  # Steps 0-1 warm up, the controller learns from step 2 on: four steps
  # sample both warm-up and plain architectures and update the controller.
  # An XLA build steps every weight every step (search.py), so the plain
  # graph it is compared with does too (the deferred form has its own test,
  # tests/supernet/test_deferred.py).
  values = dict(max_steps=8, increase_ops_warmup_steps_fraction=0.25,
                increase_filters_warmup_steps_fraction=0.25,
                rl_delay_steps_fraction=0.25, model_warmup_steps_fraction=0.0,
                unused_weight_steps='every_step')
  values.update(overrides)
  return tiny.tiny_config(tmp_path, **values)


def _search_inputs(config, channels: int) -> List[np.ndarray]:
  rng = np.random.default_rng(0)
  b, v, size = (config.train_batch_size, config.validation_batch_size,
                config.image_size)
  return [rng.normal(size=(b, size, size, channels)).astype(np.float32),
          rng.normal(size=(v, size, size, channels)).astype(np.float32),
          rng.integers(0, config.num_classes, b).astype(np.int32),
          rng.integers(0, config.num_classes, v).astype(np.int32)]


def _search_computation(config, spec, use_xla: bool = False) -> Callable:
  """The search step as TPU compilation wraps it; also outputs the packed
  host_call scalars and the sampled indices (the model_fn's collection).

  With `use_xla`, the step is built as its plan says for XLA (functional
  conds, masked widths, every-step updates)."""
  plan = plan_lib.resolve(config, plan_lib.Environment(xla=use_xla))
  model_fn = search.make_model_fn(config, plan, spec)

  def computation(train_images, validation_images, train_labels,
                  validation_labels):
    est = model_fn({'train_images': train_images,
                    'validation_images': validation_images},
                   {'train_labels': train_labels,
                    'validation_labels': validation_labels},
                   tf.estimator.ModeKeys.TRAIN, {})
    _, (_, packed) = est.host_call
    with tf.control_dependencies([est.train_op]):
      return [tf.identity(est.loss), tf.identity(packed),
              tf.identity(tf1.get_collection(search.SAMPLED_INDICES)[-1])]
  return computation


def _run(graph: tf.Graph, outputs, steps: int,
         initial: Dict[str, np.ndarray] = None):
  """Runs `outputs` `steps` times from `initial` (all variables by name).

  Returns:
    The per-step outputs and every variable's value at the start.
  """
  with graph.as_default():
    variables = tf1.global_variables()
    init = tf1.global_variables_initializer()
  with tf1.Session(graph=graph) as session:
    session.run(init)
    if initial is not None:
      assert sorted(initial) == sorted(v.op.name for v in variables)
      for v in variables:
        v.load(initial[v.op.name], session)
    start = dict(zip([v.op.name for v in variables],
                     session.run(variables)))
    results = [session.run(outputs) for _ in range(steps)]
    final = dict(zip([v.op.name for v in variables], session.run(variables)))
  return results, start, final


def _search_steps(config, spec, channels: int, use_xla: bool, steps: int,
                  initial=None):
  """Builds the search step (plain, or compiled with XLA) and runs it.

  Returns:
    `_run`'s results and the graph built.
  """
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    inputs = [tf.constant(x) for x in _search_inputs(config, channels)]
    computation = _search_computation(config, spec, use_xla)
    if use_xla:
      outputs = xla.compile(computation, inputs)
    else:
      outputs = computation(*inputs)
  return _run(graph, outputs, steps, initial), graph


def _check_close(xla_results, plain_results):
  for compiled, plain in zip(xla_results, plain_results):
    np.testing.assert_allclose(compiled[0], plain[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(compiled[1], plain[1], rtol=RTOL, atol=ATOL)


def test_search_step_under_xla_matches_the_plain_graph(tmp_path):
  # The warm-ups are over, so the controller learns every step. The draws
  # are integer hashes of (seed, step, replica) (controller.counter_uniform),
  # bit-identical with and without XLA, so both sample alike.
  config = _search_config(tmp_path, increase_ops_warmup_steps_fraction=0.0,
                          increase_filters_warmup_steps_fraction=0.0,
                          rl_delay_steps_fraction=0.0)
  spec = tiny.tiny_spec()
  (plain, start, plain_end), plain_graph = _search_steps(
      config, spec, 1, False, STEPS)
  (compiled, _, xla_end), xla_graph = _search_steps(
      config, spec, 1, True, STEPS, initial=start)
  plain_types, xla_types = ({op.type for op in g.get_operations()}
                            for g in (plain_graph, xla_graph))
  # The seam worked: the CPU graph has v1 conds, the XLA one functional Ifs.
  assert 'Switch' in plain_types and 'Switch' not in xla_types
  assert len({tuple(p[2]) for p in plain}) > 1  # The samples do vary.
  for c, p in zip(compiled, plain):
    np.testing.assert_array_equal(c[2], p[2])
  _check_close(compiled, plain)
  # Controller logits, the baseline and Adam's slots after the last step.
  controller_vars = [n for n in plain_end
                     if n.startswith(search.CONTROLLER_SCOPE + '/')]
  assert any('baseline' in n for n in controller_vars)
  for name in controller_vars:
    np.testing.assert_allclose(xla_end[name], plain_end[name], rtol=RTOL,
                               atol=ATOL, err_msg=name)
  assert plain[0][0] != plain[-1][0]  # The shared weights train.


def test_a_search_with_step_build_xla_compiles_its_step_and_runs(
    tmp_path, monkeypatch):
  # step_build=xla off TPU: the model_fn wraps the step in one XLA
  # computation itself (the compiled network's values are compared with the
  # graph's above) and the estimator runs it, with its hooks, host_call and
  # checkpoints. With a constant validation accuracy, each step's reward is
  # the cost model's for the architecture the step sampled. Without a GPU
  # the runner adds the CPU compile options (conftest.py set them for this
  # process's compiles already: only the runner's setting is checked).
  monkeypatch.delenv('XLA_FLAGS', raising=False)
  config = _search_config(
      tmp_path, max_steps=3, increase_ops_warmup_steps_fraction=0.0,
      increase_filters_warmup_steps_fraction=0.0, rl_delay_steps_fraction=0.0,
      unused_weight_steps='auto', step_build='xla',
      constant_validation_accuracy=0.5)
  steps = replicas.record_search(str(tmp_path), **{
      f.name: getattr(config, f.name) for f in dataclasses.fields(config)
      if f.name != 'model_dir'})
  with open(tmp_path / plan_lib.PLAN_FILENAME) as f:
    plan = json.load(f)
  assert plan['xla'] and plan['compiled_by_model_fn']
  assert plan['shared_update'] == 'every_step'  # What `auto` is under XLA.
  assert progress.latest_step(str(tmp_path)) == 3
  if not tf.config.list_physical_devices('GPU'):
    assert os.environ['XLA_FLAGS'] == runtime_xla.with_cpu_compile_options('')
  assert len(steps) == 3 and len({str(s['indices']) for s in steps}) > 1
  model = cost_models.get(config.cost_model)
  context = cost_models.context_for(config)
  for step in steps:
    cost = model.cost(tiny.tiny_spec(), step['indices'][0], context)
    expected = 0.5 + config.rl_cost_model_exponent * abs(
        cost / config.rl_cost_model_target - 1)  # The `abs` reward.
    np.testing.assert_allclose(step['reward'], [expected], rtol=RTOL)


def _standalone_steps(config, spec, use_xla: bool, steps: int, initial=None):
  rng = np.random.default_rng(0)
  images = rng.normal(size=(config.train_batch_size, config.image_size,
                            config.image_size, 1)).astype(np.float32)
  labels = rng.integers(0, config.num_classes,
                        config.train_batch_size).astype(np.int32)
  model_fn = make_model_fn(config, spec)

  def computation(images, labels):
    est = model_fn(images, labels, tf.estimator.ModeKeys.TRAIN, {})
    _, (_, packed) = est.host_call
    with tf.control_dependencies([est.train_op]):
      return [tf.identity(est.loss), tf.identity(packed)]

  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(0)
    inputs = [tf.constant(images), tf.constant(labels)]
    outputs = (xla.compile(computation, inputs) if use_xla
               else computation(*inputs))
  return _run(graph, outputs, steps, initial)


def test_standalone_step_under_xla_matches_the_plain_graph(tmp_path):
  spec = tiny.tiny_spec()
  # No dropout of either kind: a stateful random op is the one thing XLA
  # draws differently; everything else is deterministic.
  config = TrainEvalConfig(
      search_space='tiny', indices=architecture.format_indices(
          architecture.largest(spec)), model_dir=str(tmp_path),
      num_classes=10, num_train_examples=10000, image_size=28,
      input_channels=1, train_batch_size=4, max_steps=8, dropout_rate=0.0,
      path_dropout_rate=0.0)
  plain, start, plain_end = _standalone_steps(config, spec, False, STEPS)
  compiled, _, xla_end = _standalone_steps(config, spec, True, STEPS,
                                           initial=start)
  _check_close(compiled, plain)
  assert plain[0][0] != plain[-1][0]  # It trains.
  # Weights and the BN moving averages the compiled update ops maintain.
  for name, value in plain_end.items():
    np.testing.assert_allclose(xla_end[name], value, rtol=RTOL, atol=ATOL,
                               err_msg=name)


def _one_compiled_search_step(tmp_path, name: str) -> Tuple[float, float]:
  """Compiles and runs one step of a full space at 32 x 32 pixels."""
  space = search_spaces.get(name)
  config = SearchConfig(
      search_space=name, model_dir=str(tmp_path), num_classes=10,
      num_train_examples=10000, image_size=32, input_channels=3,
      train_batch_size=2, max_steps=100, seed=1,
      cost_model=space.cost_model,
      cost_model_space=space.pixel1_model or space.cost_model_space,
      rl_cost_model_target=space.default_cost_target)
  graph = tf.Graph()
  with graph.as_default():
    inputs = [tf.constant(x) for x in _search_inputs(config, 3)]
    outputs = xla.compile(
        _search_computation(config, space.spec(), use_xla=True), inputs)
  results, _, _ = _run(graph, outputs, 1)
  return float(results[0][0]), results[0][1]


@pytest.mark.slow
@pytest.mark.parametrize('name', search_spaces.search_space_names())
def test_full_search_space_step_compiles_under_xla(tmp_path, name):
  loss, scalars = _one_compiled_search_step(tmp_path, name)
  assert np.isfinite(loss)
  assert np.all(np.isfinite(scalars))
