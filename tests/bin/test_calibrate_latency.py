"""bin/calibrate_latency.py: bad input is one line, exit 2, nothing written.

The calibration itself is tested in tests/cost_models/test_calibration.py.
"""

import json
import os
import stat
import subprocess
import sys

import pytest

from bin import calibrate_latency
from bin import cli
from bin import describe_arch
import search_spaces
from tests.bin import one_process
from tunas_search.cost_models import calibration
from tunas_search.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TOOL = os.path.join(ROOT, 'bin', 'calibrate_latency.py')


_SPACE = '--search_space=proxylessnas_search'


# (flags, message): refused in one line, exit 2, nothing written.
_BAD_INPUT = [
    # Only the spaces the tool takes: no reference nets.
    (['--search_space=nasnet'], "unknown search space 'nasnet'; valid "
     f'choices: {", ".join(search_spaces.search_space_names())}, or '
     'MODULE:FUNCTION for a space in your own code'),
    (['--search_space=mobilenet_v2'], "'mobilenet_v2' is a reference "
     'architecture, not a search space'),
    (['--search_space=proxylessnas_search', '--backend=adb'],
     'backend adb needs benchmark_binary'),
    (['--search_space=proxylessnas_search', '--backend=coreml'],
     'flag --backend=coreml'),
    # The fit needs calibration.MIN_MEASUREMENTS: refused up front.
    ([_SPACE, '--num_samples=0'], 'num_samples must be at least '
     f'{calibration.MIN_MEASUREMENTS} (the fit holds out every '
     f'{calibration.HOLDOUT}th measurement), got 0'),
    ([_SPACE, f'--num_samples={calibration.MIN_MEASUREMENTS - 1}'],
     f'num_samples must be at least {calibration.MIN_MEASUREMENTS}'),
    ([_SPACE, '--seed=-1'], 'seed must be >= 0, got -1'),
    # The configs' range, as every tool.
    ([_SPACE, '--image_size=5'],
     'image_size 5 is outside the valid range 28..512'),
    ([_SPACE, '--image_size=20'],
     'image_size 20 is outside the valid range 28..512'),
    ([_SPACE, '--image_size=513'],
     'image_size 513 is outside the valid range 28..512'),
    # Checked before calibration.json and measurements.jsonl are written.
    ([_SPACE, '--backend=adb', '--adb=/nonexistent/adb',
      '--benchmark_binary=/data/local/tmp/benchmark_model'],
     "adb '/nonexistent/adb' is not an executable file"),
    ([_SPACE, '--output_dir='], '--output_dir is empty'),
    (['--search_space=proxylessnas_search', '--max_reference_ratio=0.5'],
     'max_reference_ratio must be >= 1, got 0.5'),
    # MobileNetV4's two stages are scored as their one-stage space.
    (['--search_space=mobilenet_v4_conv_small_fine'],
     'mobilenet_v4_conv_small_fine is scored with the latency model of '
     'mobilenet_v4_conv_small_search, which holds all its architectures: '
     'calibrate --search_space=mobilenet_v4_conv_small_search'),
]


def _assert_refused(output_dir, code, stderr, message):
  assert code == 2, stderr
  lines = [l for l in stderr.splitlines() if l.strip()]
  assert len(lines) == 1, stderr
  assert message in lines[0]
  assert not os.path.exists(output_dir)


@pytest.fixture(scope='module')
def bad_input_results(tmp_path_factory):
  """(output dir, exit code, stderr) of each _BAD_INPUT case, in one
  process (tests/bin/one_process.py)."""
  return one_process.refusals(
      'calibrate_latency', 'output_dir', _BAD_INPUT,
      lambda: tmp_path_factory.mktemp('bad') / 'cal')


@pytest.mark.parametrize('case', range(len(_BAD_INPUT)),
                         ids=[m for _, m in _BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(bad_input_results, case):
  _assert_refused(*bad_input_results[case], _BAD_INPUT[case][1])


# Two of them as whole processes: a flag that does not parse, a config that
# does not validate.
@pytest.mark.parametrize('case', [3, 4], ids=['flag', 'config'])
def test_bad_input_in_a_real_process(tmp_path, case):
  flags, message = _BAD_INPUT[case]
  output_dir = tmp_path / 'cal'
  done = subprocess.run([sys.executable, TOOL, f'--output_dir={output_dir}',
                         *flags], capture_output=True, text=True, cwd=ROOT,
                        timeout=600, check=False)
  _assert_refused(str(output_dir), done.returncode, done.stderr, message)


def _stand_in_adb(tmp_path, script):
  """An executable `adb` running `script` (sh); no phone is used."""
  adb = tmp_path / 'adb'
  adb.write_text('#!/bin/sh\n' + script)
  adb.chmod(adb.stat().st_mode | stat.S_IEXEC)
  return str(adb)


@pytest.mark.parametrize('script, message', [
    ('echo "error: no devices/emulators found" >&2; exit 1\n',
     'cannot reach the device with {adb} (error: no devices/emulators '
     'found)'),
    # The device's shell finds no executable there.
    ('shift; sh -c "$*"\n', 'benchmark_binary '
     '/data/local/tmp/benchmark_model is not an executable file on the '
     'device'),
    # adb ran, but said nothing the probe asks for.
    ('exit 0\n', 'cannot reach the device with {adb} (0)'),
])
def test_adb_backend_is_checked_before_anything_is_written(tmp_path, script,
                                                          message):
  adb = _stand_in_adb(tmp_path, script)
  output_dir = tmp_path / 'cal'
  done = _tool('calibrate_latency.py', _SPACE, f'--output_dir={output_dir}',
               '--backend=adb', f'--adb={adb}',
               '--benchmark_binary=/data/local/tmp/benchmark_model')
  assert done.returncode == 2, done.stderr
  (line,) = done.stderr.strip().splitlines()
  assert line.startswith('calibrate_latency.py: error: ' +
                         message.format(adb=adb))
  assert not output_dir.exists()


def test_adb_probe_asks_the_device_for_the_benchmark_binary(tmp_path):
  log = tmp_path / 'adb.log'
  # Runs the probe's command line as the device's shell would.
  adb = _stand_in_adb(tmp_path, f'echo "$@" >> {log}\n'
                      'shift 3; sh -c "$*"\n')
  binary = tmp_path / 'benchmark model'  # A space: the path is quoted.
  config = calibration.CalibrationConfig(
      search_space='tiny', output_dir=str(tmp_path / 'cal'), image_size=28,
      backend='adb', adb=adb, device_serial='emulator-5554',
      benchmark_binary=str(binary))
  with pytest.raises(ConfigError, match='is not an executable file on the '
                     'device'):
    calibration.check_backend(config)
  binary.write_text('#!/bin/sh\n')
  binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
  calibration.check_backend(config)
  assert log.read_text().splitlines()[-1].startswith(
      f"-s emulator-5554 shell if test -x '{binary}'; then ")
  assert not (tmp_path / 'cal').exists()


def _tool(name, *flags):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'bin', name),
                         *flags], capture_output=True, text=True, cwd=ROOT,
                        timeout=600, check=False)


def test_calibrate_then_every_tool_reads_the_model(tmp_path, monkeypatch,
                                                  capsys):
  # calibrate_latency and describe_arch run in this process, one TensorFlow
  # start for three tools (sample_random defines its flags at import: a
  # process of its own); test_bad_input_in_a_real_process runs
  # calibrate_latency as a whole process.
  space = '--search_space=tests.e2e.tiny:tiny_spec'
  shape = ['--image_size=28', '--input_channels=1', '--num_classes=10']
  output_dir = tmp_path / 'cal'
  # Real TFLite builds and timings on this CPU, which other tests may share
  # (pytest-xdist): no retakes (a retake waits RETAKE_WAIT_S and times
  # again), and every timing kept, so the outcome does not depend on the
  # machine's load. tests/cost_models/test_calibration.py tests the
  # disturbance rules with stand-in timings.
  monkeypatch.setattr(calibration, 'RETAKES', 0)
  # Plans from 200 candidates, not 2,000, as
  # tests/cost_models/test_calibration.py does: the plan counts its pool's
  # MAdds first, seconds for 2,000; nothing here depends on the pool's size.
  monkeypatch.setattr(calibration, 'POOL', 200)
  one_process.run_main(calibrate_latency, space, f'--output_dir={output_dir}',
              '--num_samples=10', '--runs=3', *shape,
              '--max_reference_ratio=1e9')
  assert 'within +-10%' in capsys.readouterr().out
  model = output_dir / 'latency_model.json'
  assert model.exists()
  one_process.run_main(describe_arch, space, *shape, f'--cost_model_file={model}',
              '--format=json')
  described = json.loads(capsys.readouterr().out)
  assert 'cost/measured' in described
  # What cost/measured estimates: float32 models, as calibrated.
  assert described['latency_model_precision'] == 'float32'
  sampled = _tool('sample_random.py', space, *shape, '--cost_model=measured',
                  f'--cost_model_file={model}', '--seed=0', '--format=json')
  assert sampled.returncode == 0, sampled.stderr[-2000:]
  # Fitted at 28 pixels: refused at 32 (a UsageError: one line, exit 2).
  with pytest.raises(cli.UsageError) as refused:
    one_process.run_main(describe_arch, space, '--image_size=32',
                '--input_channels=1', f'--cost_model_file={model}')
  assert str(refused.value).endswith(
      'the latency model was fitted for image size 28, not 32; calibrate one '
      'with bin/calibrate_latency.py')
