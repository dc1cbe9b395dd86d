"""bin/calibrate_latency.py: bad input is one line, exit 2, nothing written.

The calibration itself is tested in tests/test_calibration.py.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TOOL = os.path.join(ROOT, 'bin', 'calibrate_latency.py')


@pytest.mark.parametrize('flags, message', [
    (['--search_space=nasnet'], "unknown search space 'nasnet'"),
    (['--search_space=mobilenet_v2'], "'mobilenet_v2' is a reference "
     'architecture, not a search space'),
    (['--search_space=proxylessnas_search', '--backend=adb'],
     'backend adb needs benchmark_binary'),
    (['--search_space=proxylessnas_search', '--backend=coreml'],
     'flag --backend=coreml'),
    (['--search_space=proxylessnas_search', '--num_samples=0'],
     'num_samples must be positive, got 0'),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags, message):
  output_dir = tmp_path / 'cal'
  done = subprocess.run([sys.executable, TOOL, f'--output_dir={output_dir}',
                         *flags], capture_output=True, text=True, cwd=ROOT,
                        timeout=120, check=False)
  assert done.returncode == 2, done.stderr
  lines = [l for l in done.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, done.stderr
  assert message in lines[0]
  assert not output_dir.exists()
