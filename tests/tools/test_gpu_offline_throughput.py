"""Tests of tools/gpu_offline/throughput.sh, issue 48's GPU command: its
table of runs, the deadline that skips what cannot finish, and the JSON
line of each run, with a stand-in for bench/throughput.py (the benchmark
itself: tests/bench/test_throughput.py; a rehearsal of the whole command on
a CPU: tools/gpu_offline/README.md)."""

import json
import os
import subprocess
import sys

import pytest

from tests import files

SCRIPT = os.path.join(files.ROOT, 'tools', 'gpu_offline', 'throughput.sh')
RUNS = ['pnas_b128_graph', 'pnas_b128_xla', 'pnas_b256_graph',
        'mnv3_b128_graph', 'mnv3_b128_xla', 'pnas_b256_xla']
# Stands in for the Python that runs the benchmark: logs its arguments,
# fails for mobilenet_v3_like_search, prints a result otherwise; any other
# use (throughput.sh's own JSON lines) goes to this test's Python.
STAND_IN = """#!/bin/bash
if [ "$1" = bench/throughput.py ]; then
  shift
  echo "args: $*" >&2
  case "$*" in *mobilenet*) echo "Out of memory" >&2; exit 1;; esac
  echo '{"variants": {"graph:float32": {"search_images_per_s": 10.0,'
  echo ' "parts_images_per_s": 12.0, "search_vs_parts_ratio": 1.2,'
  echo ' "first_run_s": {"search": 3.0}, "gpu_utilisation": null}}}'
  exit 0
fi
exec %s "$@"
"""


def _run(python, out, **env):
  return subprocess.run(['bash', SCRIPT, python, str(out)],
                        capture_output=True, text=True, check=False,
                        env={**os.environ, **env}, timeout=120)


def _lines(out):
  with open(out / 'throughput.jsonl') as f:
    return [json.loads(line) for line in f]


def test_each_run_appends_its_json_line_and_its_log(tmp_path):
  python = tmp_path / 'python'
  python.write_text(STAND_IN % sys.executable)
  python.chmod(0o755)
  result = _run(str(python), tmp_path / 'out', MIN_RUN_S='1')
  assert result.returncode == 0, result.stderr
  lines = _lines(tmp_path / 'out')
  assert [line['run'] for line in lines] == RUNS
  for line in lines:
    failed = line['run'].startswith('mnv3')
    assert line['rc'] == (1 if failed else 0)
    assert (line['result'] is None) == failed
  assert lines[0]['result']['variants']['graph:float32'][
      'search_images_per_s'] == 10.0
  logs = (tmp_path / 'out' / 'throughput_logs.txt').read_text()
  assert '=== pnas_b128_graph (rc=0, ' in logs
  assert ('args: --search_space=proxylessnas_search --batch_size=128 '
          '--variants=graph:float32,graph:bfloat16 --image_size=224 '
          '--steps=10 --repeats=3') in logs
  assert '=== mnv3_b128_graph (rc=1, ' in logs and 'Out of memory' in logs
  # One summary line per run and variant, or why a run has none.
  assert ('pnas_b256_graph graph:float32 search 10.0 img/s, parts 12.0 '
          'img/s, ratio 1.2, first run 3.0 s, GPU None') in result.stdout
  assert 'mnv3_b128_xla rc=1, no result' in result.stdout
  assert sorted(os.listdir(tmp_path / 'out')) == [
      'throughput.jsonl', 'throughput_logs.txt']


def test_small_rehearses_at_32_pixels_and_xla_on_the_tiny_space(tmp_path):
  python = tmp_path / 'python'
  python.write_text(STAND_IN % sys.executable)
  python.chmod(0o755)
  result = _run(str(python), tmp_path / 'out', MIN_RUN_S='1', SMALL='1')
  assert result.returncode == 0, result.stderr
  logs = (tmp_path / 'out' / 'throughput_logs.txt').read_text()
  assert ('args: --search_space=examples.my_spaces:tiny --batch_size=2 '
          '--variants=graph:float32,xla:float32,xla:bfloat16 '
          '--image_size=32 --steps=1 --repeats=1') in logs
  assert ('args: --search_space=proxylessnas_search --batch_size=2 '
          '--variants=graph:float32,graph:bfloat16') in logs


def test_runs_that_cannot_get_their_minimum_are_skipped(tmp_path):
  # No time at all: every run says it was skipped, none is started.
  result = _run(sys.executable, tmp_path / 'out', THROUGHPUT_S='0')
  assert result.returncode == 0, result.stderr
  assert _lines(tmp_path / 'out') == [
      {'run': run, 'skipped': '0 s left of THROUGHPUT_S=0'} for run in RUNS]
  assert not (tmp_path / 'out' / 'throughput_logs.txt').exists()


@pytest.mark.parametrize('args, env, message', [
    ([], {}, 'usage: bash tools/gpu_offline/throughput.sh PYTHON OUT_DIR'),
    (['python'], {}, 'usage: '),
    (['python', 'OUT'], {'THROUGHPUT_S': '7m'},
     "THROUGHPUT_S and MIN_RUN_S must be whole seconds, got '7m'"),
    (['python', 'OUT'], {'MIN_RUN_S': '-1'}, "got '-1'"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, env, message):
  args = [str(tmp_path / a) if a == 'OUT' else a for a in args]
  result = subprocess.run(['bash', SCRIPT, *args], capture_output=True,
                          text=True, check=False,
                          env={**os.environ, **env}, timeout=60)
  assert result.returncode == 2
  assert message in result.stderr.strip().splitlines()[-1]
  assert not (tmp_path / 'OUT').exists()
