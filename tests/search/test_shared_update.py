"""`shared_update.for_plan`: the update and the training pass's form the
plan names (their values are compared step by step in
tests/supernet/test_deferred.py and tests/e2e/test_xla.py)."""

import dataclasses

import pytest

from tunas_search.search import shared_update
from tunas_search.config import plan as plan_lib
from tunas_search.config import SearchConfig
from tunas_search.supernet import forms


def _config(**overrides) -> SearchConfig:
  values = dict(search_space='tiny', model_dir='/unused', num_classes=10,
                num_train_examples=1000, image_size=28, input_channels=1,
                train_batch_size=4, rl_cost_model_target=1e5,
                cost_model='madds')
  values.update(overrides)
  return SearchConfig(**values)


@pytest.mark.parametrize('overrides, environment, kind, form', [
    (dict(), plan_lib.Environment(), shared_update.DeferredUpdate,
     forms.deferred('sampled')),
    (dict(unused_weight_steps='deferred'), plan_lib.Environment(),
     shared_update.DeferredUpdate, forms.deferred('sampled')),
    (dict(supernet_widths='masked', unused_weight_steps='deferred'),
     plan_lib.Environment(), shared_update.DeferredUpdate,
     forms.deferred('masked')),
    (dict(unused_weight_steps='every_step'), plan_lib.Environment(),
     shared_update.EveryStepUpdate, forms.every_step('sampled')),
    (dict(), plan_lib.Environment(xla=True), shared_update.EveryStepUpdate,
     forms.xla()),
])
def test_the_plan_picks_the_update_and_its_form(overrides, environment, kind,
                                                form):
  config = _config(**overrides)
  update = shared_update.for_plan(config, plan_lib.resolve(config,
                                                           environment))
  assert type(update) is kind  # pylint: disable=unidiomatic-typecheck
  assert update.form == form
  # Only the deferred form records the weights' uses.
  assert (update.uses is not None) == form.records_uses


def test_the_deferred_update_reads_snapshots_even_post_update():
  # Its catch-ups come before the training pass's reads, which must be
  # snapshots; pre_update validation shares its own.
  config = _config(unused_weight_steps='deferred')
  plan = plan_lib.resolve(config)
  deferred = shared_update.for_plan(config, plan)
  assert deferred.training_snapshots(None) == {}
  shared = {}
  assert shared_update.for_plan(config, plan).training_snapshots(
      shared) is shared
  every_step = shared_update.for_plan(
      config, dataclasses.replace(plan, shared_update='every_step'))
  assert every_step.training_snapshots(None) is None
  assert every_step.training_snapshots(shared) is shared
