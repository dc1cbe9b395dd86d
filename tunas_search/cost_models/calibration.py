"""Latency calibration: sample architectures, measure them, fit a model.

`bin/calibrate_latency.py` drives this. The plan of architectures depends
only on the space and the seed, and each measurement is appended to
`measurements.jsonl` as soon as it is taken, so an interrupted calibration
resumes where it stopped and a rerun with a larger `num_samples` measures
only the new ones. The fit (`cost_models.measured`) uses every fifth
measurement as held-out data and reports its errors.
"""

import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from absl import logging
import numpy as np

from tunas_search.space import architecture
from tunas_search.space import schema
from tunas_search.config import ConfigError
from tunas_search.config import check
from tunas_search.config import check_image_size
from tunas_search.config import check_seed
from tunas_search.config import option
from tunas_search.config.export import check_quantize
from tunas_search.config.export import PRECISIONS
from tunas_search.config.export import QUANTIZE_MODES
from tunas_search.cost_models import analytic
from tunas_search.cost_models import base
from tunas_search.cost_models import measured
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      Residual, Zero)

MEASUREMENTS = 'measurements.jsonl'
SETTINGS = 'calibration.json'
MODEL = 'latency_model.json'
PLOT = 'predicted_vs_measured.png'
BACKENDS = ('tflite_cpu', 'adb')
STATISTICS = ('min', 'median')
# Candidates the stratified half of the plan is drawn from, and the MAdds
# bins it cycles through (smallest to largest), so that the plan covers the
# whole cost range and not only its crowded middle.
POOL = 2000
BINS = 10
# Every HOLDOUT-th measurement is held out of the fit.
HOLDOUT = 5
# The fewest undisturbed measurements a fit takes: two held out, eight to
# fit on.
MIN_MEASUREMENTS = 2 * HOLDOUT
# A median this much above the fastest run means other work shared the CPU
# during the timing: the architecture is timed again (at most RETAKES more
# times, RETAKE_WAIT_S apart) and the least disturbed timing is kept.
NOISY_RATIO = 1.10
RETAKES = 4
RETAKE_WAIT_S = 1.0
# Other work on the machine can slow every run of a timing alike, which the
# median/min spread misses: on this project's 2-core VM, timings taken while
# another process built a graph were 35-70% slower, with a normal spread
# (that work slowed the reference below by 8-14%; a busy numpy loop on the
# other core, by under 2%). On this machine's CPU (tflite_cpu) a fixed reference
# network is therefore timed before and after each architecture; its fastest
# run over the fastest seen in this calibration (`reference_ratio`) above
# QUIET_RATIO means the machine was busy, and the architecture is timed
# again. A measurement still above `max_reference_ratio` (default 1.10)
# after its retakes is left out of the fit (and counted in its report).
QUIET_RATIO = 1.05


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
  """One calibration; everything but num_samples must match on resume."""
  search_space: str = option(None, 'Search space to calibrate.')
  output_dir: str = option(None, 'Where measurements and the model go.')
  num_samples: int = option(200, 'Architectures to measure in total.')
  image_size: int = option(224, 'Input height and width.')
  input_channels: int = option(3, 'Input channels.')
  num_classes: int = option(1000, 'Classifier outputs.')
  threads: int = option(1, 'Threads of the TFLite interpreter.')
  quantize: str = option(
      'none', 'Time models quantized like bin/export_model.py --quantize '
      'does (int8: full integer, float32 input/output); the fitted model '
      'then estimates their latency.', choices=QUANTIZE_MODES)
  backend: str = option('tflite_cpu', 'tflite_cpu (this machine) or adb '
                        '(an Android device).', choices=BACKENDS)
  runs: int = option(20, 'Timed runs per architecture (median taken).')
  warmup_runs: int = option(3, 'Untimed runs first.')
  seed: int = option(0, 'Seed of the plan of architectures.')
  # Which timing the model predicts. Both are recorded, so a refit with the
  # other needs no new measurements.
  statistic: str = option(
      'min', 'Timing the model predicts: min (the fastest timed run: robust '
      'to other work on a shared machine, as timeit advises) or median (what '
      'phone benchmarks report).', choices=STATISTICS)
  # A fit setting like the statistic: a refit may change it.
  max_reference_ratio: float = option(
      1.10, 'Leave out of the fit a measurement whose reference network ran '
      'this many times slower than its fastest (other work on the machine); '
      'a large value keeps every measurement.')
  adb: str = option('adb', 'adb binary (backend adb).')
  device_serial: Optional[str] = option(None, 'adb device serial.')
  benchmark_binary: Optional[str] = option(
      None, "Path of TensorFlow Lite's benchmark_model on the device.")

  def __post_init__(self):
    check(bool(self.search_space), 'search_space is required')
    check(bool(self.output_dir), 'output_dir is required')
    check(self.num_samples >= MIN_MEASUREMENTS,
          f'num_samples must be at least {MIN_MEASUREMENTS} (the fit holds '
          f'out every {HOLDOUT}th measurement), got {self.num_samples}')
    check_image_size(self.image_size)
    check_seed(self.seed)
    for name in ('input_channels', 'num_classes', 'threads', 'runs'):
      check(getattr(self, name) > 0,
            f'{name} must be positive, got {getattr(self, name)}')
    check(self.warmup_runs >= 0,
          f'warmup_runs must be >= 0, got {self.warmup_runs}')
    check(self.max_reference_ratio >= 1.0,
          f'max_reference_ratio must be >= 1, got {self.max_reference_ratio}')
    check_quantize(self.quantize)
    check(self.backend in BACKENDS, f'unknown backend {self.backend!r}; '
          f'valid choices: {", ".join(BACKENDS)}')
    check(self.backend != 'adb' or bool(self.benchmark_binary),
          'backend adb needs benchmark_binary (the path of benchmark_model '
          'on the device)')

  @property
  def context(self) -> base.CostContext:
    return base.CostContext(self.search_space, self.image_size,
                            self.num_classes, self.input_channels)

  def settings(self) -> Dict[str, Any]:
    """What a resume must agree with (all but num_samples, output_dir and
  the fit's settings)."""
    values = dataclasses.asdict(self)
    for name in ('num_samples', 'output_dir', 'statistic',
                 'max_reference_ratio'):
      del values[name]
    return values


def _madds(spec: Any, indices: Sequence[int],
           context: base.CostContext) -> float:
  masked = architecture.with_indices(spec, indices)
  return float(analytic.count(masked, context)[1])


def _smallest(spec: Any) -> List[int]:
  """The first choice of every decision, or its skip (`Zero`) if it has
  one: choices are ordered small to large, as `architecture.largest`
  assumes."""
  return [next((j for j, c in enumerate(d.oneof.choices)
                if isinstance(c, Zero)), 0) for d in schema.decisions(spec)]


def plan(spec: Any, context: base.CostContext, seed: int) -> Iterator[List[int]]:
  """An endless, seed-determined sequence of architectures to measure.

  The smallest and the largest network first, then alternately a uniform
  sample and a sample from the next MAdds bin of a candidate pool. Any
  prefix is the plan of a smaller calibration.
  """
  yield architecture.largest(spec)
  yield _smallest(spec)
  uniform = np.random.default_rng([seed, 0])
  pick = np.random.default_rng([seed, 1])
  pool_rng = np.random.default_rng([seed, 2])
  pool = [architecture.random_indices(spec, pool_rng) for _ in range(POOL)]
  costs = np.array([_madds(spec, p, context) for p in pool])
  edges = np.linspace(costs.min(), costs.max(), BINS + 1)
  bins = [list(np.flatnonzero((costs >= lo) & (costs <= hi)))
          for lo, hi in zip(edges[:-1], edges[1:])]
  k = 0
  while True:
    yield architecture.random_indices(spec, uniform)
    # Skip bins that ran out (or were empty).
    for _ in range(BINS):
      members = bins[k % BINS]
      k += 1
      if members:
        yield pool[members.pop(int(pick.integers(len(members))))]
        break


@dataclasses.dataclass(frozen=True)
class Measurement:
  index: int
  architecture: str
  latency_ms: float
  min_ms: float
  madds: float
  seconds: float  # Wall time of building, converting and timing it.
  # The reference network's slowdown around the timing (`QUIET_RATIO`);
  # None where there is no reference (adb: a phone runs nothing else).
  reference_ratio: Optional[float] = None


def read_measurements(path: str) -> List[Measurement]:
  """The measurements taken so far; a torn last line (a kill) is dropped."""
  if not os.path.exists(path):
    return []
  out = []
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  for number, line in enumerate(lines):
    try:
      out.append(Measurement(**json.loads(line)))
    except (ValueError, TypeError):
      if number == len(lines) - 1:
        logging.warning('Dropping an incomplete last line of %s', path)
        break
      raise ConfigError(f'{path} line {number + 1} is not a measurement; '
                        'move the file away to start over') from None
  # Rewrite without a torn line, so appends start on a fresh line.
  with open(path, 'w', encoding='utf-8') as f:
    f.writelines(json.dumps(dataclasses.asdict(m)) + '\n' for m in out)
  return out


def describe_device(config: CalibrationConfig) -> Dict[str, Any]:
  """What the latencies were measured on."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cpu = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      names = re.findall(r'^model name\s*:\s*(.+)$', f.read(), re.M)
    cpu = names[0] if names else cpu
  except OSError:
    pass
  device = {'backend': config.backend, 'threads': config.threads,
            'tensorflow': tf.__version__, 'runs': config.runs,
            'warmup_runs': config.warmup_runs}
  if config.backend == 'tflite_cpu':
    device.update(cpu=cpu, host=platform.node(), cores=os.cpu_count())
  else:
    device.update(device_serial=config.device_serial,
                  benchmark_binary=config.benchmark_binary)
  return device


# benchmark_model's summary line, e.g. "count=20 first=... avg=14575.2
# std=... median=14500"; values in microseconds.
_STAT = re.compile(r'count=\d+.*?\bmin=([\d.]+).*?\bavg=([\d.]+)'
                   r'(?:.*?\bmedian=([\d.]+))?')


def parse_benchmark_output(text: str) -> Dict[str, float]:
  """(median or average, min) latency in ms from benchmark_model's output.

  Reads the statistics line of the timed runs (the last `count=` line);
  TensorFlow Lite prints the median only in newer releases, else the
  average is used.

  Raises:
    ValueError: if no statistics line is found.
  """
  matches = [m for line in text.splitlines() for m in [_STAT.search(line)]
             if m]
  if not matches:
    raise ValueError('no timing statistics (count=... avg=...) in '
                     'benchmark_model output: ' + text.strip()[-300:])
  m = matches[-1]
  typical = float(m.group(3) or m.group(2))
  return {'latency_ms': typical / 1000.0, 'min_ms': float(m.group(1)) / 1000.0}


def adb_commands(config: CalibrationConfig, local_model: str,
                 remote_model: str) -> List[List[str]]:
  """The adb command lines that time one model on the device."""
  adb = shlex.split(config.adb) + (
      ['-s', config.device_serial] if config.device_serial else [])
  return [
      adb + ['push', local_model, remote_model],
      adb + ['shell', config.benchmark_binary, f'--graph={remote_model}',
             f'--num_threads={config.threads}',
             f'--warmup_runs={config.warmup_runs}',
             f'--num_runs={config.runs}']]


def _measure_adb(config: CalibrationConfig, model: bytes) -> Dict[str, float]:
  with tempfile.TemporaryDirectory() as tmp:
    local = os.path.join(tmp, 'model.tflite')
    with open(local, 'wb') as f:
      f.write(model)
    output = ''
    for command in adb_commands(config, local,
                                '/data/local/tmp/tunas_calibration.tflite'):
      done = subprocess.run(command, capture_output=True, text=True,
                            check=False)
      if done.returncode != 0:
        raise RuntimeError(f'{shlex.join(command)} failed ({done.returncode})'
                           f': {(done.stderr or done.stdout).strip()[-300:]}')
      output = done.stdout + done.stderr
  return parse_benchmark_output(output)


# What check_backend's probe prints on the device: whether the benchmark
# binary can be run. Anything else means adb did not reach the device.
_PROBE_OK, _PROBE_MISSING = 'tunas-calibration-ok', 'tunas-calibration-missing'


def check_backend(config: CalibrationConfig) -> None:
  """Refuses an adb backend whose adb or benchmark_model cannot be run.

  Called before anything is written, so that a bad path is a one-line error
  rather than a failure after the calibration's files were created. Asks the
  device (one `adb shell`) whether the benchmark binary is executable.

  Raises:
    ConfigError: if `adb` is not an executable, the device cannot be
      reached, or `benchmark_binary` is not executable on it.
  """
  if config.backend != 'adb':
    return
  adb = shlex.split(config.adb)
  if not adb or shutil.which(adb[0]) is None:
    raise ConfigError(f'adb {config.adb!r} is not an executable file; give '
                      'the path of adb (Android platform tools) with --adb')
  serial = ['-s', config.device_serial] if config.device_serial else []
  probe = (f'if test -x {shlex.quote(config.benchmark_binary)}; then echo '
           f'{_PROBE_OK}; else echo {_PROBE_MISSING}; fi')
  command = adb + serial + ['shell', probe]
  try:
    done = subprocess.run(command, capture_output=True, text=True,
                          check=False, timeout=120)
  except (OSError, subprocess.TimeoutExpired) as e:
    raise ConfigError(f'cannot run {shlex.join(command)}: {e}') from None
  if _PROBE_MISSING in done.stdout:
    raise ConfigError(f'benchmark_binary {config.benchmark_binary} is not an '
                      'executable file on the device; push TensorFlow Lite\'s '
                      'benchmark_model there (adb push) and chmod +x it')
  if _PROBE_OK not in done.stdout:
    output = (done.stderr or done.stdout).strip().splitlines()
    raise ConfigError(f'cannot reach the device with {shlex.join(adb + serial)}'
                      f' ({output[-1] if output else done.returncode})')


def reference_spec() -> ConvTower:
  """The fixed network timed next to every measurement (`QUIET_RATIO`):
  a stem and four inverted bottlenecks, ~0.6 ms at REFERENCE_SIZE on this
  project's CPU, long enough for a steady fastest run and short enough to
  cost little next to an architecture's timing."""
  def bottleneck(strides):
    return DepthwiseBottleneck(3, FilterMultiplier(6.0), strides=strides)
  return ConvTower((
      Block((Conv(3, strides=2), Activation('relu')), 16),
      Block((bottleneck(2), Residual(bottleneck(1))), 24),
      Block((bottleneck(2), Residual(bottleneck(1))), 32)))


REFERENCE_SIZE = 128


class Reference:
  """How busy the machine is now: a fixed workload's time over its best.

  Args:
    time_fn: times the workload once, in any unit (its fastest run).
    primes: timings taken at the start for a first best.
  """

  def __init__(self, time_fn: Callable[[], float], primes: int = 3):
    self._time = time_fn
    self.best = min(time_fn() for _ in range(primes))

  def ratio(self) -> float:
    """The workload's time now over the fastest seen (>= 1)."""
    now = self._time()
    self.best = min(self.best, now)
    return now / self.best


def tflite_reference(threads: int) -> Reference:
  """`Reference` timing `reference_spec()` with TFLite on this CPU."""
  from tunas_search.runtime import tflite  # pylint: disable=g-import-not-at-top
  timer = tflite.tflite_timer(tflite.random_tflite_model(
      reference_spec(), REFERENCE_SIZE, 3, 10), threads)
  return Reference(lambda: timer(10, 2).min_ms)


def measure(config: CalibrationConfig, spec: Any, indices: Sequence[int],
            reference: Optional[Reference] = None) -> Dict[str, float]:
  """Builds one architecture with random weights, converts it as
  `config.quantize` says and times it (again, if disturbed:
  `least_disturbed`).

  Returns:
    {'latency_ms', 'min_ms'} and, given a reference, 'reference_ratio':
    the larger of its ratios just before and just after the timing.
  """
  from tunas_search.runtime import tflite  # pylint: disable=g-import-not-at-top
  masked = architecture.with_indices(spec, indices)
  model = tflite.random_tflite_model(masked, config.image_size,
                                     config.input_channels, config.num_classes,
                                     quantize=config.quantize)
  # adb pushes the quantized model as it pushes a float one.
  if config.backend == 'adb':
    return least_disturbed(lambda: _measure_adb(config, model))
  timer = tflite.tflite_timer(model, config.threads)

  def time_once():
    before = reference.ratio() if reference else None
    latency = timer(config.runs, config.warmup_runs)
    result = {'latency_ms': latency.median_ms, 'min_ms': latency.min_ms}
    if reference:
      result['reference_ratio'] = max(before, reference.ratio())
    return result
  return least_disturbed(time_once)


def _default_measure() -> Callable:
  """`measure`, with a reference built on the first tflite_cpu timing (a
  calibration that is already complete builds none)."""
  reference = None

  def measure_fn(config, spec, indices):
    nonlocal reference
    if config.backend != 'tflite_cpu':
      return measure(config, spec, indices)
    if reference is None:
      reference = tflite_reference(config.threads)
    return measure(config, spec, indices, reference)
  return measure_fn


def _check_settings(config: CalibrationConfig) -> None:
  """Writes the settings, or checks them against an earlier run's."""
  path = os.path.join(config.output_dir, SETTINGS)
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      old = json.load(f)
    # Calibrations from before quantized ones timed float models.
    old.setdefault('quantize', 'none')
    changed = sorted(k for k, v in config.settings().items()
                     if old.get(k) != v)
    if changed:
      raise ConfigError(
          f'{config.output_dir} holds a calibration with other settings '
          f'({", ".join(f"{k}={old.get(k)!r}" for k in changed)}); use a new '
          '--output_dir or the same settings')
    return
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(config.settings(), f, indent=1)


def calibrate(config: CalibrationConfig, spec: Any,
              measure_fn: Optional[Callable] = None) -> List[Measurement]:
  """Measures the plan's first `num_samples` architectures (resumable).

  Args:
    config: the calibration.
    spec: the search space's spec.
    measure_fn: `(config, spec, indices) -> {'latency_ms', 'min_ms'}`;
      default `measure` with a `Reference` on this CPU (tests substitute a
      synthetic device); may add 'reference_ratio'.

  Raises:
    ConfigError: if the backend cannot be run (`check_backend`, checked
      before anything is written), or `output_dir` holds a calibration with
      other settings or measurements off the plan.
  """
  if measure_fn is None:
    check_backend(config)
    measure_fn = _default_measure()
  os.makedirs(config.output_dir, exist_ok=True)
  _check_settings(config)
  path = os.path.join(config.output_dir, MEASUREMENTS)
  done = read_measurements(path)
  context = config.context
  planned = plan(spec, context, config.seed)
  began, taken = time.time(), 0
  with open(path, 'a', encoding='utf-8') as f:
    for i in range(config.num_samples):
      indices = next(planned)
      name = architecture.format_indices(indices)
      if i < len(done):
        if done[i].architecture != name:
          raise ConfigError(f'{path} does not follow the plan of seed '
                            f'{config.seed} at measurement {i}; use a new '
                            '--output_dir')
        continue
      start = time.time()
      result = measure_fn(config, spec, indices)
      m = Measurement(i, name, float(result['latency_ms']),
                      float(result['min_ms']), _madds(spec, indices, context),
                      time.time() - start, result.get('reference_ratio'))
      f.write(json.dumps(dataclasses.asdict(m)) + '\n')
      f.flush()
      done.append(m)
      taken += 1
      elapsed = time.time() - began
      left = config.num_samples - i - 1
      logging.info('measured %d/%d: %.2f ms (%.1f s each; ETA %s)', i + 1,
                   config.num_samples, m.latency_ms, elapsed / taken,
                   _format_seconds(elapsed / taken * left))
  return done[:config.num_samples]


def disturbance(timing: Dict[str, float]) -> float:
  """How disturbed a timing looks; at most 1 when it looks quiet."""
  score = timing['latency_ms'] / timing['min_ms'] / NOISY_RATIO
  ratio = timing.get('reference_ratio')
  return score if ratio is None else max(score, ratio / QUIET_RATIO)


def least_disturbed(time_once: Callable[[], Dict[str, float]],
                    wait: Callable[[float], None] = time.sleep
                    ) -> Dict[str, float]:
  """Times a model, again (after a pause) while its timings look disturbed.

  Args:
    time_once: times the (already built) model once: {'latency_ms',
      'min_ms'} and optionally 'reference_ratio'.
    wait: sleeps between retakes (tests pass a stand-in).

  Returns:
    The least disturbed timing.
  """
  best = time_once()
  for _ in range(RETAKES):
    if disturbance(best) <= 1.0:
      break
    logging.info('timing looks disturbed (median/min %.2f, reference %s): '
                 'timing it again', best['latency_ms'] / best['min_ms'],
                 'none' if best.get('reference_ratio') is None
                 else f'{best["reference_ratio"]:.2f}')
    wait(RETAKE_WAIT_S)
    again = time_once()
    if disturbance(again) < disturbance(best):
      best = again
  return best


def _format_seconds(seconds: float) -> str:
  minutes, s = divmod(int(round(seconds)), 60)
  return f'{minutes}m{s:02d}s'


@dataclasses.dataclass(frozen=True)
class Fit:
  model: measured.LatencyModel
  heldout_predicted: List[float]
  heldout_measured: List[float]


def fit(config: CalibrationConfig, spec: Any,
        measurements: Sequence[Measurement],
        device: Optional[Dict[str, Any]] = None) -> Fit:
  """Fits on all but every HOLDOUT-th measurement and reports on those.

  Measurements still disturbed after their retakes (`max_reference_ratio`)
  are in neither part; the report counts them (`disturbed_left_out`).
  """
  quiet = np.array([m.reference_ratio is None
                    or m.reference_ratio <= config.max_reference_ratio
                    for m in measurements], dtype=bool)
  check(int(quiet.sum()) >= MIN_MEASUREMENTS,
        f'need at least {MIN_MEASUREMENTS} undisturbed measurements to fit '
        f'and hold out, got {int(quiet.sum())} of {len(measurements)}; measure '
        f'more (--num_samples) or keep more (--max_reference_ratio)')
  context = config.context
  names = measured.feature_names(spec, context)
  rows = np.array([measured.features(
      architecture.with_indices(spec, architecture.parse_indices(
          m.architecture, spec)), context, names) for m in measurements],
                  dtype=np.float64)
  latencies = np.array([m.min_ms if config.statistic == 'min' else
                        m.latency_ms for m in measurements])
  held = np.arange(len(measurements)) % HOLDOUT == HOLDOUT - 1
  train, test = ~held & quiet, held & quiet
  model = measured.fit(
      rows[train], latencies[train], names,
      search_space=config.search_space,
      image_size=config.image_size, input_channels=config.input_channels,
      num_classes=config.num_classes,
      precision=PRECISIONS[config.quantize],
      device=dict(device or {}, statistic=config.statistic,
                  max_reference_ratio=config.max_reference_ratio))
  predicted = [float(model.predict(r)) for r in rows[test]]
  report = measured.error_report(predicted, latencies[test])
  report['disturbed_left_out'] = int((~quiet).sum())
  model = dataclasses.replace(model, heldout=report)
  return Fit(model, predicted, [float(x) for x in latencies[test]])


def write_model(output_dir: str, result: Fit) -> str:
  path = os.path.join(output_dir, MODEL)
  temporary = path + '.tmp'
  with open(temporary, 'w', encoding='utf-8') as f:
    f.write(result.model.to_json())
  os.replace(temporary, path)  # Never a half-written model.
  return path


def plot(output_dir: str, result: Fit, title: str) -> Optional[str]:
  """Predicted vs measured held-out latencies as a PNG (needs matplotlib)."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  except ImportError:
    logging.warning('matplotlib is missing (pip install .[plot]): no plot')
    return None
  figure, axes = pyplot.subplots(figsize=(4.5, 4.5))
  x = np.array(result.heldout_measured)
  axes.scatter(x, result.heldout_predicted, s=12)
  line = np.array([x.min(), x.max()])
  axes.plot(line, line, 'k-', lw=0.8, label='exact')
  for share in (0.9, 1.1):
    axes.plot(line, share * line, 'k:', lw=0.8)
  axes.set_xlabel('measured latency (ms)')
  axes.set_ylabel('predicted latency (ms)')
  axes.set_title(title, fontsize=9)
  figure.tight_layout()
  path = os.path.join(output_dir, PLOT)
  figure.savefig(path, dpi=120)
  pyplot.close(figure)
  return path


def format_report(report: Dict[str, float], statistic: str) -> str:
  return (f'held-out architectures: {report["count"]} ({statistic} latency)\n'
          f'mean absolute % error:  {report["mape_percent"]:.2f}%\n'
          f'within +-5%:            {100 * report["within_5_percent"]:.0f}%\n'
          f'within +-10%:           {100 * report["within_10_percent"]:.0f}%\n'
          f"Kendall's tau:          {report['kendall_tau']:.3f}"
          + (f'\nleft out as disturbed:  {report["disturbed_left_out"]} '
             'measurement(s)' if report.get('disturbed_left_out') else ''))
