"""Latency calibration: the plan, resumable measurements, the adb backend,
and the whole calibrate -> fit -> search path on the tiny space."""

import dataclasses
import json
import os
import stat

import numpy as np
import pytest

import search_spaces
from tests.e2e import tiny
from tunas_search.space import architecture
from tunas_search.cost_models import calibration
from tunas_search import cost_models
from tunas_search.search import runner
from tunas_search.config import ConfigError
from tunas_search.cost_models import analytic


@pytest.fixture(autouse=True)
def _small_pool(monkeypatch):
  """Plans draw their stratified half from 200 candidates, not 2,000.

  A plan counts the MAdds of its whole pool when it starts, seconds for
  2,000 on the tiny space, once per `calibrate`; the tests here check what
  the plan and the calibration do with a pool (determinism, prefix
  stability, the cost range, resumes), none of which depends on its size.
  tests/bin/test_calibrate_latency.py runs a calibration with the real pool.
  """
  monkeypatch.setattr(calibration, 'POOL', 200)


def _config(tmp_path, **overrides):
  values = dict(search_space='tiny', output_dir=str(tmp_path / 'cal'),
                num_samples=12, image_size=28, input_channels=1,
                num_classes=10, runs=3, warmup_runs=1)
  values.update(overrides)
  return calibration.CalibrationConfig(**values)


class _SyntheticDevice:
  """A deterministic 'device': latency linear in MAdds; counts its calls and
  can fail at a chosen call (a crash mid-calibration)."""

  def __init__(self, fail_at=None, disturbed=()):
    self.calls = []
    self.fail_at = fail_at
    self.disturbed = set(disturbed)  # Calls timed while the machine was busy.

  def __call__(self, config, spec, indices):
    if self.fail_at is not None and len(self.calls) == self.fail_at:
      raise KeyboardInterrupt('simulated crash')
    self.calls.append(architecture.format_indices(indices))
    masked = architecture.with_indices(spec, indices)
    ms = 0.5 + 1e-6 * float(analytic.count(masked, config.context)[1])
    if len(self.calls) - 1 in self.disturbed:
      # Every run slower alike (a normal spread); only the reference shows.
      return {'latency_ms': 1.5 * ms, 'min_ms': 1.45 * ms,
              'reference_ratio': 1.3}
    return {'latency_ms': ms, 'min_ms': 0.95 * ms, 'reference_ratio': 1.0}


def test_plan_is_deterministic_prefix_stable_and_spans_the_costs(tmp_path):
  spec = tiny.tiny_spec()
  context = _config(tmp_path).context
  first = calibration.plan(spec, context, seed=0)
  plan = [next(first) for _ in range(40)]
  again = calibration.plan(spec, context, seed=0)
  assert [next(again) for _ in range(40)] == plan
  assert plan[0] == architecture.largest(spec)
  madds = [analytic.count(architecture.with_indices(spec, p), context)[1]
           for p in plan]
  assert madds[0] == max(madds) and madds[1] == min(madds)
  other = calibration.plan(spec, context, seed=1)
  assert [next(other) for _ in range(40)] != plan


def test_interrupted_calibration_resumes_and_grows(tmp_path):
  spec = tiny.tiny_spec()
  config = _config(tmp_path)
  crashing = _SyntheticDevice(fail_at=5)
  with pytest.raises(KeyboardInterrupt):
    calibration.calibrate(config, spec, crashing)
  path = os.path.join(config.output_dir, calibration.MEASUREMENTS)
  # A kill while writing leaves a torn last line: it is dropped.
  with open(path, 'a', encoding='utf-8') as f:
    f.write('{"index": 5, "archit')
  device = _SyntheticDevice()
  done = calibration.calibrate(config, spec, device)
  assert [m.index for m in done] == list(range(12))
  assert len(device.calls) == 7  # Only what the crash left unmeasured.
  assert crashing.calls + device.calls == [m.architecture for m in done]
  bigger = _SyntheticDevice()
  more = calibration.calibrate(_config(tmp_path, num_samples=15), spec, bigger)
  assert len(bigger.calls) == 3 and len(more) == 15
  with open(path, encoding='utf-8') as f:
    assert len(f.read().splitlines()) == 15


def test_other_settings_in_the_same_dir_are_refused(tmp_path):
  spec = tiny.tiny_spec()
  calibration.calibrate(_config(tmp_path), spec, _SyntheticDevice())
  with pytest.raises(ConfigError, match='holds a calibration with other '
                     "settings \\(threads=1\\)"):
    calibration.calibrate(_config(tmp_path, threads=2), spec,
                          _SyntheticDevice())


def test_fit_reports_held_out_errors(tmp_path):
  spec = tiny.tiny_spec()
  config = _config(tmp_path, num_samples=30)
  done = calibration.calibrate(config, spec, _SyntheticDevice())
  result = calibration.fit(config, spec, done, {'backend': 'synthetic'})
  report = result.model.heldout
  assert report['count'] == 6  # Every fifth of 30.
  # The synthetic device is linear in MAdds, which the features hold.
  assert report['mape_percent'] < 1e-6
  assert report['within_5_percent'] == 1.0
  assert report['disturbed_left_out'] == 0
  path = calibration.write_model(config.output_dir, result)
  assert cost_models.measured.load(path).heldout == report


class _DepthwiseDevice:
  """A 'device' on which every depthwise conv costs by its kind: 5x5 ones
  three times what their MAdds say, which MAdds alone cannot fit."""

  def __call__(self, config, spec, indices):
    terms = analytic.Terms()
    analytic.count(architecture.with_indices(spec, indices), config.context,
                   terms=terms)
    ms = 0.2 + sum(1e-6 * (3 if kind == 'depthwise5x5' else 1) * sums[0]
                   for kind, sums in terms.sums.items())
    return {'latency_ms': ms, 'min_ms': ms}


def test_the_mobilenet_v4_space_calibrates_per_depthwise_kind(tmp_path,
                                                             monkeypatch):
  # The one-stage space scores both stages of MobileNetV4's search: its fit
  # has the UIB's kinds (start and middle depthwise convs, the shared 1x1s).
  monkeypatch.setattr(calibration, 'POOL', 100)  # Counting 2000 takes 15 s.
  space = search_spaces.get('mobilenet_v4_conv_small_search')
  config = _config(tmp_path, search_space=space.name, num_samples=20,
                   image_size=32)
  done = calibration.calibrate(config, space.spec(), _DepthwiseDevice())
  result = calibration.fit(config, space.spec(), done, {})
  kinds = {n.split('/')[0] for n in result.model.feature_names}
  assert kinds == {'conv3x3', 'conv1x1', 'expand1x1', 'depthwise3x3',
                   'depthwise5x5', 'project1x1', 'pool', 'dense'}
  assert result.model.heldout['mape_percent'] < 1e-3


def test_measurements_the_reference_calls_disturbed_are_left_out(tmp_path):
  spec = tiny.tiny_spec()
  config = _config(tmp_path, num_samples=30)
  # Calls 3 and 6 are fitted, call 4 is held out (every fifth).
  done = calibration.calibrate(config, spec,
                               _SyntheticDevice(disturbed=(3, 4, 6)))
  assert [m.reference_ratio for m in done].count(1.3) == 3
  result = calibration.fit(config, spec, done, {'backend': 'synthetic'})
  report = result.model.heldout
  assert report['disturbed_left_out'] == 3
  assert result.model.device['max_reference_ratio'] == 1.10  # Recorded.
  assert report['count'] == 5
  # Left in, the 45% slower timings would bias the fit.
  assert report['mape_percent'] < 1e-6
  assert 'left out as disturbed:  3' in calibration.format_report(report,
                                                                   'min')
  # A looser limit keeps them; too few undisturbed ones is refused.
  assert calibration.fit(dataclasses.replace(
      config, max_reference_ratio=1.5), spec, done).model.heldout[
          'disturbed_left_out'] == 0
  with pytest.raises(ConfigError, match=(
      r'need at least 10 undisturbed measurements to fit and hold out, got 9 '
      r'of 12; measure more \(--num_samples\) or keep more '
      r'\(--max_reference_ratio\)')):
    calibration.fit(config, spec, done[:12])
  # Without a reference (older files, adb), nothing is left out.
  older = [dataclasses.replace(m, reference_ratio=None) for m in done]
  assert calibration.fit(config, spec, older).model.heldout[
      'disturbed_left_out'] == 0


@pytest.mark.parametrize('output, ms, low', [
    ('Running benchmark for at least 20 iterations\n'
     'count=20 first=15000 curr=14000 min=13982 max=16118 avg=14575.2 '
     'std=489 p5=14000 median=14500 p95=15900\n', 14.5, 13.982),
    # Older releases print no median: the average is used.
    ('count=50 first=900 curr=880 min=850 max=990 avg=901.5 std=20\n',
     0.9015, 0.85),
])
def test_benchmark_model_output_is_parsed(output, ms, low):
  parsed = calibration.parse_benchmark_output(output)
  assert parsed['latency_ms'] == pytest.approx(ms)
  assert parsed['min_ms'] == pytest.approx(low)


def test_unparsable_benchmark_output_is_an_error():
  with pytest.raises(ValueError, match='no timing statistics'):
    calibration.parse_benchmark_output('error: no such file\n')


def test_adb_backend_commands_with_a_stand_in_adb(tmp_path):
  # A stand-in for adb: logs its arguments, prints benchmark_model's
  # statistics line for `shell`. No phone was used (docs/cost_models.md).
  log = tmp_path / 'adb.log'
  adb = tmp_path / 'adb'
  adb.write_text(
      '#!/bin/sh\n'
      f'echo "$@" >> {log}\n'
      'if [ "$3" = shell ]; then\n'
      '  echo "count=7 first=3100 curr=3000 min=2950 max=3300 avg=3050 '
      'std=40 median=3010"\n'
      'fi\n')
  adb.chmod(adb.stat().st_mode | stat.S_IEXEC)
  config = _config(tmp_path, backend='adb', adb=str(adb),
                   device_serial='emulator-5554',
                   benchmark_binary='/data/local/tmp/benchmark_model',
                   runs=7, warmup_runs=2, threads=4)
  spec = tiny.tiny_spec()
  result = calibration.measure(config, spec, architecture.largest(spec))
  assert result == {'latency_ms': 3.01, 'min_ms': 2.95}
  push, shell = log.read_text().splitlines()
  remote = '/data/local/tmp/tunas_calibration.tflite'
  assert push.startswith('-s emulator-5554 push ')
  assert push.endswith(f'model.tflite {remote}')
  assert shell == (f'-s emulator-5554 shell /data/local/tmp/benchmark_model '
                   f'--graph={remote} --num_threads=4 --warmup_runs=2 '
                   '--num_runs=7')


def test_adb_needs_the_benchmark_binary(tmp_path):
  with pytest.raises(ConfigError, match='backend adb needs benchmark_binary'):
    _config(tmp_path, backend='adb')


# Slow (a real TFLite build and timing of 10 networks): in `make test`,
# tests/bin/test_calibrate_latency.py's every-tool test calibrates with real
# timings and fits, and test_a_search_names_its_int8_latency_model searches
# with a fitted model file and checks that config.json names it.
@pytest.mark.slow
def test_calibrate_fit_and_search_with_the_measured_model(tmp_path,
                                                         monkeypatch):
  spec = tiny.tiny_spec()
  config = _config(tmp_path, num_samples=10)
  # Real TFLite builds and timings on this CPU, which other tests may share
  # (pytest-xdist): no timing counts as disturbed here, so the outcome does
  # not depend on the machine's load. The disturbance rules are tested
  # with stand-in timings below.
  monkeypatch.setattr(calibration, 'RETAKES', 0)
  config = dataclasses.replace(config, max_reference_ratio=1e9)
  done = calibration.calibrate(config, spec)
  assert all(m.latency_ms > 0 for m in done)
  # Timed next to the reference network on this CPU.
  assert all(m.reference_ratio >= 1.0 for m in done)
  result = calibration.fit(config, spec, done,
                           calibration.describe_device(config))
  assert result.model.device['backend'] == 'tflite_cpu'
  path = calibration.write_model(config.output_dir, result)
  target = float(np.median([m.latency_ms for m in done]))
  search = tiny.tiny_config(tmp_path / 'search', cost_model='measured',
                            cost_model_file=path, rl_cost_model_target=target,
                            max_steps=4)
  found = runner.run_search(search, spec)
  assert found.costs['measured'] > 0
  with open(os.path.join(search.model_dir, 'config.json'),
            encoding='utf-8') as f:
    assert json.load(f)['cost_model_file'] == path


def test_disturbed_timings_are_taken_again():
  # Medians far above the minimum, as when other work shares the CPU, then
  # an undisturbed timing.
  timings = [{'latency_ms': 3.0, 'min_ms': 1.0},
             {'latency_ms': 2.0, 'min_ms': 1.0},
             {'latency_ms': 1.05, 'min_ms': 1.0},
             {'latency_ms': 1.0, 'min_ms': 1.0}]
  calls, waits = iter(timings), []
  assert calibration.least_disturbed(lambda: next(calls),
                                     waits.append) == timings[2]
  assert next(calls) == timings[3]  # Quiet at the third: no more retakes.
  assert waits == [calibration.RETAKE_WAIT_S] * 2
  calls, waits = iter(timings[2:]), []
  assert calibration.least_disturbed(lambda: next(calls),
                                     waits.append) == timings[2]
  assert next(calls) == timings[3] and not waits  # Undisturbed: timed once.


def test_a_slow_reference_means_a_retake_even_with_a_normal_spread():
  quiet_spread = {'latency_ms': 1.02, 'min_ms': 1.0}
  busy = [dict(quiet_spread, reference_ratio=r)
          for r in (1.3, 1.2, 1.08, 1.12, 1.09)]
  calls, waits = iter(busy), []
  # Never quiet: RETAKES retakes, then the least disturbed of them.
  assert calibration.least_disturbed(lambda: next(calls),
                                     waits.append) == busy[2]
  assert len(waits) == calibration.RETAKES
  calls = iter([dict(quiet_spread, reference_ratio=1.3),
                dict(quiet_spread, reference_ratio=1.01)])
  assert calibration.least_disturbed(
      lambda: next(calls), lambda s: None)['reference_ratio'] == 1.01


def test_reference_ratio_is_time_over_the_fastest_seen():
  times = iter([2.0, 1.0, 1.5,  # Primes: the best is 1.0.
                1.2, 0.8, 0.8, 1.0])
  reference = calibration.Reference(lambda: next(times), primes=3)
  assert reference.best == 1.0
  assert reference.ratio() == pytest.approx(1.2)
  assert reference.ratio() == 1.0 and reference.best == 0.8
  assert reference.ratio() == 1.0
  assert reference.ratio() == pytest.approx(1.25)


def test_adb_pushes_the_int8_model_as_it_pushes_a_float_one(tmp_path):
  # The stand-in adb keeps a copy of what it was given to push.
  pushed = tmp_path / 'pushed.tflite'
  adb = tmp_path / 'adb'
  adb.write_text(
      '#!/bin/sh\n'
      f'if [ "$1" = push ]; then cp "$2" {pushed}; fi\n'
      'if [ "$1" = shell ]; then\n'
      '  echo "count=3 first=900 curr=800 min=790 max=950 avg=850 std=9"\n'
      'fi\n')
  adb.chmod(adb.stat().st_mode | stat.S_IEXEC)
  config = _config(tmp_path, backend='adb', adb=str(adb), quantize='int8',
                   benchmark_binary='/data/local/tmp/benchmark_model')
  spec = tiny.tiny_spec()
  result = calibration.measure(config, spec, architecture.largest(spec))
  # No median in this (older) output: the average (microseconds -> ms).
  assert result == {'latency_ms': 0.85, 'min_ms': 0.79}
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  interpreter = tf.lite.Interpreter(model_path=str(pushed))
  kinds = {d['dtype'] for d in interpreter.get_tensor_details()}
  assert np.int8 in kinds  # Full integer inside, float32 at the edges.


def test_an_int8_calibration_makes_an_int8_latency_model(tmp_path):
  spec = tiny.tiny_spec()
  config = _config(tmp_path, num_samples=10, quantize='int8')
  done = calibration.calibrate(config, spec, _SyntheticDevice())
  result = calibration.fit(config, spec, done)
  assert result.model.precision == 'int8'
  path = calibration.write_model(config.output_dir, result)
  assert json.load(open(path, encoding='utf-8'))['precision'] == 'int8'
  # A float calibration in the same dir is another calibration.
  with pytest.raises(ConfigError, match="other settings \\(quantize='int8'"):
    calibration.calibrate(_config(tmp_path, num_samples=10), spec,
                          _SyntheticDevice())
  # Latency models written before quantized calibrations were float32.
  values = json.load(open(path, encoding='utf-8'))
  del values['precision']
  assert cost_models.measured.LatencyModel.from_json(
      json.dumps(values)).precision == 'float32'


def test_calibrations_from_before_quantize_resume(tmp_path):
  spec = tiny.tiny_spec()
  calibration.calibrate(_config(tmp_path), spec, _SyntheticDevice())
  settings = tmp_path / 'cal' / calibration.SETTINGS
  values = json.loads(settings.read_text())
  del values['quantize']
  settings.write_text(json.dumps(values))
  device = _SyntheticDevice()
  calibration.calibrate(_config(tmp_path, num_samples=14), spec, device)
  assert len(device.calls) == 2  # Only the new ones.


def test_a_search_names_its_int8_latency_model(tmp_path):
  spec = tiny.tiny_spec()
  config = _config(tmp_path, num_samples=10, quantize='int8')
  done = calibration.calibrate(config, spec, _SyntheticDevice())
  path = calibration.write_model(config.output_dir,
                                 calibration.fit(config, spec, done))
  search = tiny.tiny_config(tmp_path / 'search', cost_model='measured',
                            cost_model_file=path, max_steps=2,
                            rl_cost_model_target=1.0)
  found = runner.run_search(search, spec)
  assert found.costs['measured'] > 0
  with open(os.path.join(search.model_dir, 'config.json'),
            encoding='utf-8') as f:
    assert json.load(f)['cost_model_file'] == path
  assert found.latency_precision == 'int8'
  with open(os.path.join(search.model_dir, runner.RESULT_FILENAME),
            encoding='utf-8') as f:
    assert json.load(f)['latency_precision'] == 'int8'
  from tunas_search.results import render  # pylint: disable=g-import-not-at-top
  assert 'latency model         int8 (what cost/measured estimates)' in (
      render.format_text(found))
  # Without a latency model file, nothing to name.
  plain = dataclasses.replace(found, latency_precision=None)
  assert 'latency_precision' not in plain.to_dict()
