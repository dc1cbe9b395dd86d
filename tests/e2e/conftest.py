"""Fixtures shared by the end-to-end tests."""

import pytest

from tests.e2e import tiny
from tunas_search.search import runner


@pytest.fixture(scope='session')
def finished(tmp_path_factory):
  """A tiny search run to step 4 (checkpoints 0, 2, 4); copy it to change
  it."""
  model_dir = str(tmp_path_factory.mktemp('search') / 'run')
  runner.run_search(tiny.tiny_config(model_dir, max_steps=4),
                    tiny.tiny_spec())
  return model_dir
