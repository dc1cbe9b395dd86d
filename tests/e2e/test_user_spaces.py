"""A user's search space end to end: an installed plug-in, and MODULE:FUNCTION.

The tools run as subprocesses, as a user runs them. The plug-in is a real
package with an entry point, pip-installed into a temporary directory (not
into the venv) that the tools find on PYTHONPATH: entry points are read from
any installed distribution on the path. The tutorial's module
(examples/my_spaces.py, docs/custom_search_space.md) is the MODULE:FUNCTION
space: described, sampled, searched, analysed and trained here, so the
tutorial cannot rot (in `make test` on an image folder, by
tests/e2e/test_image_folders.py).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.bin.test_quiet_errors import HANG_GUARD_S
from tests.bin.test_quiet_errors import ROOT
from tests.bin.test_quiet_errors import assert_one_line_error
from tests.bin.test_quiet_errors import user_env

TUTORIAL_SPACE = 'examples.my_spaces:tiny'
# A few steps of a small batch: enough to build, run, checkpoint and resume.
SEARCH_FLAGS = ('--train_batch_size=8', '--max_steps=4',
                '--tpu_iterations_per_loop=2', '--rl_cost_model_target=5e5',
                '--image_size=28', '--seed=1')


def run_tool(tool, *args, pythonpath=None):
  env = user_env()
  if pythonpath:
    env['PYTHONPATH'] = os.pathsep.join([pythonpath, ROOT])
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, 'bin', f'{tool}.py'), *args],
      capture_output=True, text=True, env=env, cwd=ROOT,
      timeout=HANG_GUARD_S)


def ok(done):
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stdout


@pytest.fixture(scope='module')
def plugin_path(tmp_path_factory):
  """A package with an entry point, installed with pip into a directory."""
  source = tmp_path_factory.mktemp('plugin_source')
  (source / 'setup.py').write_text(textwrap.dedent('''
      import setuptools
      setuptools.setup(
          name='tunas-test-plugin', version='0.1', py_modules=['tiny_plugin'],
          entry_points={'tunas_search.search_spaces': [
              'plugged_tiny = tiny_plugin:tiny']})
      '''))
  (source / 'tiny_plugin.py').write_text(textwrap.dedent('''
      """A plug-in space: the tutorial's, under another name."""
      from examples import my_spaces

      def tiny():
        """The tutorial space, installed as a plug-in."""
        return my_spaces.tiny()
      '''))
  target = tmp_path_factory.mktemp('site')
  subprocess.run(
      [sys.executable, '-m', 'pip', 'install', '--quiet', '--no-deps',
       '--no-build-isolation', '--no-index', '--target', str(target),
       str(source)], check=True, capture_output=True, timeout=HANG_GUARD_S,
      cwd=str(source))
  return str(target)


def _check_the_plugin_is_listed(plugin_path):
  done = run_tool('describe_arch', '--search_space=nope',
                  pythonpath=plugin_path)
  assert_one_line_error(done, 'describe_arch', 'plugged_tiny')
  info = json.loads(ok(run_tool('describe_arch', '--search_space=plugged_tiny',
                                '--format=json', pythonpath=plugin_path)))
  assert info['num_decisions'] == 12
  # absl's --helpfull exits with status 1.
  assert 'plugged_tiny' in run_tool('search', '--helpfull',
                                    pythonpath=plugin_path).stdout


def test_plugin_is_listed(plugin_path):
  # The fast variant of the test below: the tools find the plug-in; the
  # search of the same space is test_module_function_in_every_tool's.
  _check_the_plugin_is_listed(plugin_path)


@pytest.mark.slow  # A search subprocess more than test_plugin_is_listed.
def test_plugin_is_listed_and_searches(plugin_path, tmp_path):
  _check_the_plugin_is_listed(plugin_path)
  out = ok(run_tool('search', '--search_space=plugged_tiny',
                    f'--model_dir={tmp_path / "search"}', *SEARCH_FLAGS,
                    pythonpath=plugin_path))
  assert 'Search at step 4' in out
  with open(tmp_path / 'search' / 'config.json') as f:
    config = json.load(f)
  assert (config['search_space'], config['cost_model']) == ('plugged_tiny',
                                                            'madds')


def describe_and_sample_tutorial_space():
  """describe_arch and sample_random on the tutorial space, each a process;
  returns the two samples (MAdds at most 2e6)."""
  info = json.loads(ok(run_tool('describe_arch', f'--search_space='
                                f'{TUTORIAL_SPACE}', '--format=json',
                                '--image_size=32', '--num_classes=10')))
  assert info['search_space'] == TUTORIAL_SPACE
  assert 'cost/pixel1_latency' not in info
  samples = json.loads(ok(run_tool(
      'sample_random', f'--search_space={TUTORIAL_SPACE}', '--num_samples=2',
      '--seed=0', '--image_size=28', '--max_cost=2e6', '--format=json')))
  assert len(samples) == 2 and all(s['cost'] <= 2e6 for s in samples)
  return samples


def analyze_tutorial_search(search_dir):
  """analyze_search reads a search of the tutorial space."""
  analysis = json.loads(ok(run_tool('analyze_search',
                                    f'--model_dir={search_dir}',
                                    '--format=json')))
  assert analysis['search_space'] == TUTORIAL_SPACE


# Its fast variant is tests/e2e/test_image_folders.py's
# test_module_function_space_on_a_folder_in_every_tool: the same tools and
# assertions on the tutorial space, searched and trained on a folder.
@pytest.mark.slow
def test_module_function_in_every_tool(tmp_path):
  samples = describe_and_sample_tutorial_space()
  search_dir = tmp_path / 'search'
  out = ok(run_tool('search', f'--search_space={TUTORIAL_SPACE}',
                    f'--model_dir={search_dir}', *SEARCH_FLAGS))
  assert 'madds=' in out and 'pixel1' not in out
  analyze_tutorial_search(search_dir)
  result = json.loads(ok(run_tool(
      'train_eval', f'--search_space={TUTORIAL_SPACE}',
      f'--indices={samples[0]["architecture"]}', '--image_size=28',
      f'--model_dir={tmp_path / "final"}', '--train_batch_size=8',
      '--eval_batch_size=500', '--max_steps=2', '--format=json')))
  assert result['architecture'] == samples[0]['architecture']


@pytest.mark.parametrize('args, message', [
    (['--cost_model=pixel1_latency'],
     'fitted to the features of the three TuNAS spaces only'),
    (['--rl_cost_model_target=-1', '--cost_model=params',
      '--search_space=examples.my_spaces:missing'],
     "module examples.my_spaces has no 'missing'"),
])
def test_cost_model_and_reference_errors_are_one_line(tmp_path, args,
                                                      message):
  done = run_tool('search', f'--search_space={TUTORIAL_SPACE}',
                  f'--model_dir={tmp_path / "search"}', *args)
  assert_one_line_error(done, 'search', message)
  assert not (tmp_path / 'search').exists()
