"""Tests of tools/gpu_offline/checks.sh's refusals (it runs on a GPU machine;
these check only what it refuses before running anything)."""

import os
import subprocess

import pytest

from tests import files

SCRIPT = os.path.join(files.ROOT, 'tools', 'gpu_offline', 'checks.sh')


def _run(tmp_path, *args, **env):
  out = tmp_path / 'out'
  result = subprocess.run(
      ['bash', SCRIPT, *args], capture_output=True, text=True, check=False,
      env={**os.environ, 'OUT': str(out), **env}, timeout=60)
  return result, out


def test_an_unknown_check_is_refused_naming_the_valid_ones(tmp_path):
  result, out = _run(tmp_path, str(tmp_path), CHECKS='tests bench_xyz')
  assert result.returncode == 2
  assert ("unknown check 'bench_xyz' in CHECKS (valid: tests bench_step "
          'bench_ops bench_ab throughput)') in result.stderr
  assert not out.exists()


@pytest.mark.parametrize('baseline', [None, 'missing', 'empty'])
def test_bench_ab_needs_a_baseline_checkout(tmp_path, baseline):
  env = {'CHECKS': 'bench_ab'}
  if baseline == 'missing':
    env['BASELINE'] = str(tmp_path / 'nowhere')
  elif baseline == 'empty':
    (tmp_path / 'empty').mkdir()
    env['BASELINE'] = str(tmp_path / 'empty')
  result, out = _run(tmp_path, str(tmp_path), **env)
  assert result.returncode == 2
  assert 'bench_ab needs BASELINE=DIR' in result.stderr
  assert not out.exists()


def test_a_missing_bundle_is_refused(tmp_path):
  result, _ = _run(tmp_path, str(tmp_path / 'parts'),
                   str(tmp_path / 'unpacked'))
  assert result.returncode == 2
  assert 'no bundle.tar.xz or parts c0, c1, ...' in result.stderr
