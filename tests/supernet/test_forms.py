"""`supernet.forms`: the named forms a step plan picks its passes from."""

import pytest

from tunas_search.supernet import forms


@pytest.mark.parametrize('name, width_form, form', [
    ('xla', 'masked', forms.xla()),
    ('every_step', 'sampled', forms.every_step('sampled')),
    ('deferred', 'masked', forms.deferred('masked')),
    ('validation', 'sampled', forms.validation('sampled')),
])
def test_a_form_by_its_name(name, width_form, form):
  assert forms.named(name, width_form) == form
  assert form.name == name


def test_only_the_deferred_training_pass_records_uses():
  assert [n for n in ('xla', 'every_step', 'deferred', 'validation')
          if forms.named(n, 'masked').records_uses] == ['deferred']


def test_an_unknown_form_is_one_line():
  with pytest.raises(ValueError) as error:
    forms.named('standalone', 'masked')
  assert str(error.value) == ("unknown supernet form 'standalone'; valid: "
                              'xla, every_step, deferred, validation')
