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
    (['--search_space=proxylessnas_search', '--max_reference_ratio=0.5'],
     'max_reference_ratio must be >= 1, got 0.5'),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags, message):
  output_dir = tmp_path / 'cal'
  done = subprocess.run([sys.executable, TOOL, f'--output_dir={output_dir}',
                         *flags], capture_output=True, text=True, cwd=ROOT,
                        timeout=600, check=False)
  assert done.returncode == 2, done.stderr
  lines = [l for l in done.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, done.stderr
  assert message in lines[0]
  assert not output_dir.exists()


def _tool(name, *flags):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'bin', name),
                         *flags], capture_output=True, text=True, cwd=ROOT,
                        timeout=600, check=False)


def test_calibrate_then_every_tool_reads_the_model(tmp_path):
  space = '--search_space=tests.e2e.tiny:tiny_spec'
  shape = ['--image_size=28', '--input_channels=1', '--num_classes=10']
  output_dir = tmp_path / 'cal'
  done = _tool('calibrate_latency.py', space, f'--output_dir={output_dir}',
               '--num_samples=10', '--runs=3', *shape,
               # Other tests may share the CPU: keep every timing.
               '--max_reference_ratio=1e9')
  assert done.returncode == 0, done.stderr[-2000:]
  assert 'within +-10%' in done.stdout
  model = output_dir / 'latency_model.json'
  assert model.exists()
  described = _tool('describe_arch.py', space, *shape,
                    f'--cost_model_file={model}', '--format=json')
  assert described.returncode == 0, described.stderr[-2000:]
  assert '"cost/measured"' in described.stdout
  sampled = _tool('sample_random.py', space, *shape, '--cost_model=measured',
                  f'--cost_model_file={model}', '--seed=0', '--format=json')
  assert sampled.returncode == 0, sampled.stderr[-2000:]
  # Fitted at 28 pixels: refused at 32, in one line.
  refused = _tool('describe_arch.py', space, '--image_size=32',
                  '--input_channels=1', f'--cost_model_file={model}')
  assert refused.returncode == 2
  assert refused.stderr.strip().endswith(
      'the latency model was fitted for image size 28, not 32; calibrate one '
      'with bin/calibrate_latency.py')
