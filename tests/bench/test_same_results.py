"""Tests of bench/same_results.py's comparison (its jobs run real searches,
minutes each, so they are not run here)."""

import numpy as np
import pytest

from tests import files


@pytest.fixture(scope='module')
def same_results():
  return files.load_script('bench', 'same_results.py')


def _outputs():
  outputs = {'indices': [[0, 1], [1, 1]],
             'scalars': {'model/loss': [[2, 2.5], [4, 2.25]],
                         'rlcontroller/reward': [[2, 0.1], [4, 0.2]]},
             'result': {'architecture': '1:1', 'model_dir': '/a/search'}}
  tensors = {'w': np.arange(4, dtype=np.float32),
             'deferred_rmsprop/names': np.array([b'w'], dtype=object)}
  return outputs, tensors


def test_equal_outputs_differ_in_nothing_but_where_they_ran(same_results):
  a, a_tensors = _outputs()
  b, b_tensors = _outputs()
  b['result']['model_dir'] = '/b/search'
  assert same_results.compare(a, b, a_tensors, b_tensors) == {}


def test_every_kind_of_difference_is_named(same_results):
  a, a_tensors = _outputs()
  b, b_tensors = _outputs()
  b['indices'][1] = [0, 0]
  b['scalars']['model/loss'][1][1] = 2.2500002
  b['result']['architecture'] = '0:1'
  b_tensors['w'] = b_tensors['w'] + np.float32([0, 0, 0.5, 0])
  del b_tensors['deferred_rmsprop/names']
  diff = same_results.compare(a, b, a_tensors, b_tensors)
  assert diff['sampled_architectures']['b'] == [[0, 1], [0, 0]]
  assert diff['scalars'] == ['model/loss']
  assert diff['result'] == {'a': {'architecture': '1:1'},
                            'b': {'architecture': '0:1'}}
  assert diff['checkpoint_names'] == ['deferred_rmsprop/names']
  assert diff['checkpoint_values'] == {'tensors': ['w'],
                                       'largest_difference': 0.5}


def test_paths_of_the_model_dir_are_left_out(same_results):
  value = {'model_dir': '/x/run', 'checkpoint': '/x/run/model.ckpt-6',
           'steps': [1, {'path': '/x/run/a', 'n': 2}], 'name': 'run'}
  assert same_results._without_paths(value, '/x/run') == {  # pylint: disable=protected-access
      'steps': [1, {'n': 2}], 'name': 'run'}
