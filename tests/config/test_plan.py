"""The step plan: every `auto` of a search step resolved once, and kept.

`plan.resolve` against the config, the environment and the plan of the run
a model dir holds; `plan.previous` for model dirs with and without a
step_plan.json (those an older version wrote).
"""

import dataclasses
import json

import pytest

from tunas_search import config as config_lib
from tunas_search.config import ConfigError, SearchConfig
from tunas_search.config import plan as plan_lib
from tunas_search.config.plan import Environment

GPU = Environment(has_gpu=True)
XLA = Environment(xla=True)


def _config(model_dir='/unused', **overrides) -> SearchConfig:
  values = dict(search_space='proxylessnas_search', model_dir=str(model_dir),
                num_classes=10, num_train_examples=1000, image_size=32,
                train_batch_size=32, rl_cost_model_target=84.0)
  values.update(overrides)
  return SearchConfig(**values)


def _tpu(replicas=8, **overrides):
  return dict(use_tpu=True, tpu='x', num_replicas=replicas, **overrides)


def test_the_default_plan_on_a_cpu():
  plan = plan_lib.resolve(_config())
  assert plan == plan_lib.StepPlan(
      xla=False, width_form='sampled', shared_update='deferred',
      validation_weights='pre_update', gradient_sync_barrier=True,
      controller_on_host=False, compute_dtype='float32')
  assert plan.describe() == (
      'step plan: graph build, sampled widths, deferred RMSProp, '
      'pre_update validation, barrier on, controller placed by TensorFlow, '
      'float32')


@pytest.mark.parametrize('overrides, environment, widths, update', [
    # The deferred update wherever it can run: one replica, the graph
    # build, epsilon > 0 (docs/DESIGN.md, "The step plan").
    (dict(), Environment(), 'sampled', 'deferred'),
    (dict(), GPU, 'sampled', 'deferred'),
    (dict(model_rmsprop_epsilon=0.0), Environment(), 'sampled',
     'every_step'),
    (dict(unused_weight_steps='deferred'), Environment(), 'sampled',
     'deferred'),
    (dict(unused_weight_steps='deferred'), GPU, 'sampled', 'deferred'),
    # XLA needs static shapes and keeps TuNAS's every-step update.
    (_tpu(), Environment(), 'masked', 'every_step'),
    (dict(), XLA, 'masked', 'every_step'),
    # Replicas sampling different architectures share their gradients.
    (dict(num_replicas=2), Environment(), 'sampled', 'every_step'),
    (dict(num_replicas=2, multi_worker=True), GPU, 'sampled', 'every_step'),
    (dict(supernet_widths='masked', unused_weight_steps='every_step'),
     Environment(), 'masked', 'every_step'),
    (dict(unused_weight_steps='every_step'), GPU, 'sampled', 'every_step'),
])
def test_auto_widths_and_updates(overrides, environment, widths, update):
  plan = plan_lib.resolve(_config(**overrides), environment)
  assert (plan.width_form, plan.shared_update) == (widths, update)
  assert plan.xla == (environment.xla or bool(overrides.get('use_tpu')))


@pytest.mark.parametrize('overrides, has_gpu, on_host', [
    (dict(), True, True),  # auto: one replica on a GPU.
    (dict(), False, False),  # auto on a CPU: nothing to move.
    (dict(num_replicas=2), True, False),
    (dict(num_replicas=2, multi_worker=True), True, False),
    (_tpu(), True, False),
    (dict(controller_placement='host'), False, True),
    (dict(controller_placement='default'), True, False),
])
def test_auto_places_the_controller_on_the_host_only_beside_one_gpu(
    overrides, has_gpu, on_host):
  plan = plan_lib.resolve(_config(**overrides), Environment(has_gpu=has_gpu))
  assert plan.controller_on_host is on_host


def test_the_config_fields_pass_through():
  plan = plan_lib.resolve(_config(
      validation_weights='post_update', use_gradient_sync_barrier=False,
      use_bfloat16=True))
  assert plan.validation_weights == 'post_update'
  assert not plan.gradient_sync_barrier and plan.compute_dtype == 'bfloat16'


@pytest.mark.parametrize('weights, barrier, update, waits', [
    ('pre_update', True, 'deferred', False),
    ('pre_update', False, 'every_step', False),
    ('post_update', True, 'every_step', True),
    ('post_update', False, 'every_step', False),
    # The deferred update's catch-ups write weights outside the barrier.
    ('post_update', False, 'deferred', True),
])
def test_validation_after_update(weights, barrier, update, waits):
  plan = plan_lib.resolve(_config(
      validation_weights=weights, use_gradient_sync_barrier=barrier,
      unused_weight_steps=update))
  assert plan.validation_after_update is waits


@pytest.mark.parametrize('overrides, environment, message', [
    (dict(supernet_widths='sampled'), XLA,
     'supernet_widths=sampled cannot run under XLA (it needs static shapes); '
     'use masked or auto'),
    (dict(unused_weight_steps='deferred'), XLA,
     'unused_weight_steps=deferred cannot run under XLA; use every_step or '
     'auto'),
    # The deferred form divides by sqrt(ms + epsilon) with ms decayed over
    # idle steps (docs/method.md): an epsilon of 0 could give NaN.
    (dict(model_rmsprop_epsilon=0.0, unused_weight_steps='deferred'),
     Environment(),
     'unused_weight_steps=deferred needs model_rmsprop_epsilon > 0, got 0.0; '
     'use every_step'),
])
def test_what_cannot_run_here_is_one_line(overrides, environment, message):
  with pytest.raises(ConfigError) as error:
    plan_lib.resolve(_config(**overrides), environment)
  assert str(error.value) == message


@pytest.mark.parametrize('update', ['auto', 'every_step'])
def test_epsilon_zero_is_fine_with_every_step_updates(update):
  plan = plan_lib.resolve(_config(model_rmsprop_epsilon=0.0,
                                  unused_weight_steps=update))
  assert plan.shared_update == 'every_step'


def test_a_plan_is_checked_and_round_trips():
  plan = plan_lib.resolve(_config(), GPU)
  assert plan_lib.StepPlan.from_json(plan.to_json()) == plan
  with pytest.raises(ConfigError, match='an XLA build has masked widths'):
    dataclasses.replace(plan, xla=True)
  with pytest.raises(ConfigError, match="unknown width_form 'narrow'"):
    dataclasses.replace(plan, width_form='narrow')
  with pytest.raises(ConfigError, match='not a step plan'):
    plan_lib.StepPlan.from_json('{"xla": false}')


def test_a_run_started_every_step_resumes_every_step_under_auto():
  # `auto` was every_step for new runs before deferred became its default:
  # such a run's checkpoints hold no deferred state.
  every_step = plan_lib.resolve(_config(unused_weight_steps='every_step'))
  resumed = plan_lib.resolve(_config(), Environment(), every_step)
  assert resumed.shared_update == 'every_step'


def test_a_resumed_run_keeps_its_update(tmp_path):
  # A run that started deferred (asked for, or by `auto`) resumes deferred
  # under `auto`.
  deferred = plan_lib.resolve(_config(unused_weight_steps='deferred'))
  resumed = plan_lib.resolve(_config(), Environment(), deferred)
  assert resumed.shared_update == 'deferred'
  # Other choices follow the config and the machine anew.
  moved = plan_lib.resolve(_config(supernet_widths='masked'), GPU, deferred)
  assert moved.width_form == 'masked' and moved.controller_on_host
  assert moved.shared_update == 'deferred'
  with pytest.raises(ConfigError) as error:
    plan_lib.resolve(_config(unused_weight_steps='every_step'), Environment(),
                     deferred)
  assert str(error.value) == (
      'model dir /unused was written by an incompatible config: '
      "unused_weight_steps (was 'deferred', now 'every_step')")


@pytest.mark.parametrize('overrides, environment, xla, by_model_fn', [
    # auto is the graph off TPU (no GPU measurement says otherwise yet).
    (dict(), GPU, False, False),
    (dict(step_build='graph'), GPU, False, False),
    # Off TPU, the model_fn compiles the step itself.
    (dict(step_build='xla'), GPU, True, True),
    (dict(step_build='xla'), Environment(), True, True),
    # A TPU compiles the step; tests compile it themselves.
    (_tpu(), Environment(), True, False),
    (_tpu(step_build='xla'), Environment(), True, False),
    (dict(step_build='xla'), XLA, True, False),
])
def test_step_build(overrides, environment, xla, by_model_fn):
  plan = plan_lib.resolve(_config(**overrides), environment)
  assert (plan.xla, plan.compiled_by_model_fn) == (xla, by_model_fn)
  if xla:
    assert (plan.width_form, plan.shared_update) == ('masked', 'every_step')
    assert not plan.controller_on_host  # One program on one device.


def test_an_xla_build_keeps_the_controller_in_the_program():
  with pytest.raises(ConfigError) as error:
    plan_lib.resolve(_config(controller_placement='host'), XLA)
  assert str(error.value) == (
      'controller_placement=host cannot apply to an XLA build, which '
      'compiles the whole step on one device; use auto or default')


def test_a_deferred_run_cannot_resume_compiled():
  deferred = plan_lib.resolve(_config(unused_weight_steps='deferred'))
  assert deferred.shared_update == 'deferred'
  with pytest.raises(ConfigError) as error:
    plan_lib.resolve(_config(step_build='xla'), GPU, deferred)
  assert str(error.value) == (
      'model dir /unused holds a run whose unused weights take deferred '
      'steps, which cannot run under XLA; resume it with step_build=graph '
      '(or auto)')
  every_step = plan_lib.resolve(_config(step_build='xla'), GPU)
  assert plan_lib.resolve(_config(), GPU, every_step).shared_update == (
      'every_step')


def test_a_plan_written_before_compiled_by_model_fn_reads_as_false():
  plan = plan_lib.resolve(_config(), GPU)
  values = json.loads(plan.to_json())
  del values['compiled_by_model_fn']
  assert plan_lib.StepPlan.from_json(json.dumps(values)) == plan
  with pytest.raises(ConfigError, match='only an XLA build is compiled by'):
    dataclasses.replace(plan, compiled_by_model_fn=True)


@pytest.mark.parametrize('overrides, layout, one_process', [
    (dict(), plan_lib.Layout(), True),
    (_tpu(), plan_lib.Layout(use_tpu=True, num_replicas=8), False),
    (_tpu(replicas=1), plan_lib.Layout(use_tpu=True), False),
])
def test_the_plan_lays_out_the_step(overrides, layout, one_process):
  plan = plan_lib.resolve(_config(**overrides))
  assert plan.layout == layout
  assert plan.layout.one_process == one_process
  assert not plan_lib.Layout(num_replicas=2).one_process
  assert not plan_lib.Layout(multi_worker=True).one_process


@pytest.mark.parametrize('overrides, environment, training, validation', [
    (dict(), Environment(), 'deferred', 'validation'),
    (dict(unused_weight_steps='every_step'), Environment(), 'every_step',
     'validation'),
    (dict(), XLA, 'xla', 'xla'),
    (_tpu(), Environment(), 'xla', 'xla'),
])
def test_the_plan_names_both_forms(overrides, environment, training,
                                   validation):
  plan = plan_lib.resolve(_config(**overrides), environment)
  assert (plan.training_form, plan.validation_form) == (training, validation)


def test_the_layout_round_trips_and_older_plans_read_as_one_replica():
  plan = plan_lib.resolve(_config(**_tpu()))
  assert plan_lib.StepPlan.from_json(plan.to_json()) == plan
  values = json.loads(plan_lib.resolve(_config()).to_json())
  del values['layout']
  assert plan_lib.StepPlan.from_json(json.dumps(values)).layout == (
      plan_lib.Layout())
  values['layout'] = 3
  with pytest.raises(ConfigError, match='not a step plan'):
    plan_lib.StepPlan.from_json(json.dumps(values))


def _write_config(model_dir, **overrides):
  config = _config(model_dir, **overrides)
  config_lib.write_or_check(config, '{"spec": 1}')
  return config


def test_a_new_run_writes_its_plan_and_resumes_with_it(tmp_path):
  assert plan_lib.previous(str(tmp_path)) is None
  plan = plan_lib.resolve(_write_config(tmp_path))
  plan_lib.write(plan, str(tmp_path))
  # config.json keeps the config as given; the plan what it resolved to.
  stored = json.loads((tmp_path / config_lib.CONFIG_FILENAME).read_text())
  assert stored['unused_weight_steps'] == 'auto'
  assert plan_lib.previous(str(tmp_path)) == plan
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'config.json', 'model_spec.json', 'step_plan.json']


@pytest.mark.parametrize('recorded, update', [
    ('deferred', 'deferred'), ('every_step', 'every_step'),
    (None, 'every_step')])  # Written before the field existed.
def test_a_model_dir_written_before_plans_resumes_as_it_ran(tmp_path,
                                                            recorded, update):
  # Older versions recorded 'auto' resolved in config.json, and no plan.
  values = json.loads(_config(tmp_path).to_json())
  if recorded is None:
    del values['unused_weight_steps']
  else:
    values['unused_weight_steps'] = recorded
  (tmp_path / config_lib.CONFIG_FILENAME).write_text(json.dumps(values))
  previous = plan_lib.previous(str(tmp_path))
  assert previous.shared_update == update
  assert plan_lib.resolve(_config(tmp_path), Environment(),
                          previous).shared_update == update


def test_a_damaged_plan_is_one_line(tmp_path):
  _write_config(tmp_path)
  (tmp_path / plan_lib.PLAN_FILENAME).write_text('{"xla": tru')
  with pytest.raises(ConfigError) as error:
    plan_lib.previous(str(tmp_path))
  message = str(error.value)
  assert message.startswith(f'{tmp_path / plan_lib.PLAN_FILENAME} cannot be '
                            'used: not a step plan (')
  assert message.endswith('restore it or use another --model_dir')
  assert '\n' not in message
