"""Tests of bin/describe_arch.py: JSON and text output, one-line errors."""

import json
import math
import os
import subprocess
import sys

import pytest
from absl import flags

import search_spaces
from bin import cli
from bin import describe_arch
from tunas_search.space import architecture

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_SCRIPT = os.path.join(_ROOT, 'bin', 'describe_arch.py')
# Only stops a hung child process; not a speed requirement, so generous
# enough for a slow, loaded machine.
_HANG_GUARD_S = 600


def _main(capsys, *args):
  """Runs main in-process with `args` as flags; returns stdout."""
  flag_values = flags.FlagValues()
  describe_arch.define_flags(flag_values)
  flag_values(['describe_arch'] + list(args))
  describe_arch.main(['describe_arch'], flag_values)
  return capsys.readouterr().out


def test_json_for_mobilenet_v2(capsys):
  info = json.loads(_main(capsys, '--search_space=mobilenet_v2',
                          '--format=json'))
  assert set(info) == {
      'search_space', 'architecture', 'indices', 'block_string',
      'image_size', 'params', 'madds', 'num_decisions', 'log10_space_size', 'cost/madds', 'cost/params',
      'cost/pixel1_latency'}
  assert info['search_space'] == 'mobilenet_v2'
  assert info['image_size'] == 224  # TuNAS's, as the flag's default.
  default = search_spaces.get('mobilenet_v2').default_indices()
  # As in analyze_search's JSON: the string and its list of ints.
  assert info['architecture'] == architecture.format_indices(default)
  assert info['indices'] == list(default)
  # Trainable parameters of tf.keras.applications.MobileNetV2(classes=1000).
  assert info['params'] == 3_504_872
  assert info['madds'] == 300_774_272
  assert info['cost/params'] == 3_504_872.0
  assert info['num_decisions'] == 73
  # proxylessnas_enlarged_search: 10^28 (docs/method.md section 3), quoted to one
  # decimal, hence half a unit of it.
  assert info['log10_space_size'] == pytest.approx(28.1, abs=0.05)
  # Regression value of tests/cost_models/test_pixel1.py, quoted to 4
  # decimals; the same numpy float64 computation.
  assert info['cost/pixel1_latency'] == pytest.approx(77.2223, abs=1e-3)
  if hasattr(architecture, 'block_string'):
    assert info['block_string'].startswith('32: conv3_s2')


def test_json_options_and_explicit_indices(capsys):
  default = search_spaces.get('proxylessnas_mobile').default_indices()
  info = json.loads(_main(
      capsys, '--search_space=proxylessnas_search', '--format=json',
      '--indices=' + architecture.format_indices(default),
      '--num_classes=1001'))
  # Quoted to 4 decimals (tests/cost_models/test_pixel1.py).
  assert info['cost/pixel1_latency'] == pytest.approx(84.4162, abs=1e-3)
  assert info['params'] == 4_080_512 + 1281  # One more 1280-wide class.


def test_reference_net_without_pixel1_model(capsys):
  info = json.loads(_main(capsys, '--search_space=mobilenet_v3_large',
                          '--format=json'))
  assert 'cost/pixel1_latency' not in info
  assert info['params'] == 5_483_032
  assert info['log10_space_size'] == 0.0


def test_text_summary(capsys):
  text = _main(capsys, '--search_space=mobilenet_v2')
  assert 'search space   mobilenet_v2' in text
  assert 'params         3,504,872 (3.50M)' in text
  assert 'madds          300,774,272 (300.8M)' in text
  assert 'cost/pixel1_latency:   77.22 ms' in text


@pytest.mark.parametrize('args,message', [
    (['--search_space=nope'],
     "unknown search space 'nope'; valid choices: mnasnet_b1, mobilenet_v2"),
    ([], '--search_space is required; valid choices: mnasnet_b1'),
    (['--search_space=mobilenet_v2', '--indices=0:x'],
     "--indices: architecture string entry 1 is 'x'"),
    (['--search_space=mobilenet_v2', '--indices=0:1'],
     '--indices: architecture has 2 indices but the search space has 73'),
    (['--search_space=proxylessnas_search', '--indices=' + ':'.join(
        ['1'] + ['0'] * 72)],
     r'index 1 at position 0 \(blocks/0/filters\) is out of range; '
     r'valid: 0\.\.0'),
    (['--search_space=mobilenet_v2', '--format=xml'],
     "unknown --format 'xml'; valid choices: text, json"),
    # The configs' range, as every tool (tunas_search.config).
    (['--search_space=mobilenet_v2', '--image_size=27'],
     '^image_size 27 is outside the valid range 28..512$'),
    (['--search_space=mobilenet_v2', '--image_size=100000'],
     '^image_size 100000 is outside the valid range 28..512$'),
])
def test_bad_input_is_a_one_line_usage_error(capsys, args, message):
  with pytest.raises(cli.UsageError, match=message) as error:
    _main(capsys, *args)
  assert '\n' not in str(error.value)


def test_script_exits_2_with_one_line_on_stderr():
  result = subprocess.run(
      [sys.executable, _SCRIPT, '--search_space=nope'], cwd=_ROOT,
      capture_output=True, text=True, timeout=_HANG_GUARD_S, check=False)
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert "unknown search space 'nope'" in lines[0]
  assert 'proxylessnas_search' in lines[0]
  assert result.stdout == ''


# The smallest space with the TFLite path's layers (examples/my_spaces.py):
# converting and timing it takes a second where proxylessnas_mobile takes
# several, and the code measured is the same.
_TINY = 'examples.my_spaces:tiny'


def _costs(info):
  return {k: v for k, v in info.items() if k.startswith('cost/')}


def test_measure_latency_reports_tflite_cpu_next_to_the_estimate(capsys):
  info = json.loads(_main(capsys, f'--search_space={_TINY}',
                          '--format=json', '--measure_latency',
                          '--latency_runs=3', '--image_size=32',
                          '--num_classes=10'))
  measured = info[describe_arch.MEASURED_KEY]
  # Timings depend on the machine and its load: no time limit, only what
  # holds everywhere.
  assert math.isfinite(measured)
  assert 0 <= info[describe_arch.MEASURED_MIN_KEY] <= measured
  # The estimates are reported unchanged next to the measurement.
  estimate = describe_arch.describe(_TINY, image_size=32, num_classes=10)
  assert _costs(info) == _costs(estimate)
  text = describe_arch.format_text(info)
  assert (f'measured tflite cpu:   {measured:,.2f} ms (float32, median, 1 '
          'thread') in text
  assert info[describe_arch.MEASURED_PRECISION_KEY] == 'float32'


def test_measure_int8_latency(capsys):
  info = json.loads(_main(capsys, f'--search_space={_TINY}',
                          '--format=json', '--measure_latency',
                          '--quantize=int8', '--latency_runs=3',
                          '--image_size=32', '--num_classes=10'))
  assert info[describe_arch.MEASURED_PRECISION_KEY] == 'int8'
  assert 0 <= info[describe_arch.MEASURED_MIN_KEY] <= info[
      describe_arch.MEASURED_KEY]
  assert '(int8, median, 1 thread' in describe_arch.format_text(info)


def test_quantize_needs_measure_latency(capsys):
  with pytest.raises(cli.UsageError, match='^--quantize=int8 quantizes the '
                     'model --measure_latency times; add --measure_latency$'):
    _main(capsys, '--search_space=mobilenet_v2', '--quantize=int8')


def test_default_path_does_not_import_tensorflow():
  code = ('import sys; from bin import describe_arch; '
          'describe_arch.describe("mobilenet_v2"); '
          'print("tensorflow" in sys.modules)')
  result = subprocess.run([sys.executable, '-c', code], cwd=_ROOT,
                          capture_output=True, text=True,
                          timeout=_HANG_GUARD_S, check=True)
  assert result.stdout.strip() == 'False'
