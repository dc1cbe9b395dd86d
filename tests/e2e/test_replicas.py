"""Sampling is reproducible from the seed; replicas sample their own
architectures and share one baseline (docs/method.md section 5)."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests.e2e import replicas

_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'replicas.py')


def _indices(steps):
  return [s['indices'] for s in steps]


def test_same_seed_samples_the_same_architectures(tmp_path):
  first = replicas.record_search(str(tmp_path / 'a'), seed=5)
  again = replicas.record_search(str(tmp_path / 'b'), seed=5)
  other = replicas.record_search(str(tmp_path / 'c'), seed=6)
  assert len(first) == 6
  assert _indices(first) == _indices(again)
  assert _indices(first) != _indices(other)


def test_two_devices_sample_apart_and_share_the_mean_baseline(tmp_path):
  out = tmp_path / 'steps.json'
  model_dir = tmp_path / 'search'
  # A fresh process: the two logical CPU devices must exist before
  # TensorFlow starts.
  done = subprocess.run(
      [sys.executable, _SCRIPT, str(model_dir), str(out), '2', '3'],
      capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  steps = json.loads(out.read_text())
  assert len(steps) == 8
  for step in steps:
    assert len(step['indices']) == 2
    # The baseline's input is the cross-replica mean reward, on both.
    np.testing.assert_allclose(step['step_baseline'],
                               [np.mean(step['reward'])] * 2, rtol=1e-6)
  # Each replica draws its own architecture: with 7 decisions, identical
  # draws on most of 8 steps would mean a shared seed.
  apart = sum(s['indices'][0] != s['indices'][1] for s in steps)
  assert apart >= 6, steps
  reader = tf.train.load_checkpoint(str(model_dir))
  assert reader.get_tensor('global_step') == 8
  # One baseline update per step, not one per replica.
  assert reader.get_tensor('rlcontroller/baseline/count') == 8
  assert (model_dir / 'search_result.json').exists()


def _free_ports(n):
  """n ports free right now on localhost (the OS picks them)."""
  sockets = [socket.socket() for _ in range(n)]
  try:
    for s in sockets:
      s.bind(('localhost', 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def test_two_workers_sample_apart_and_only_the_chief_writes(tmp_path):
  model_dir = tmp_path / 'search'
  ports = ','.join(str(p) for p in _free_ports(2))
  outs = [tmp_path / f'worker{i}.json' for i in range(2)]
  workers = [subprocess.Popen(
      [sys.executable, _SCRIPT, str(model_dir), str(out), '2', '3', str(i),
       ports], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, out in enumerate(outs)]
  logs = [w.communicate(timeout=600)[0] for w in workers]
  for w, log in zip(workers, logs):
    assert w.returncode == 0, log[-3000:]
  chief, other = (json.loads(out.read_text()) for out in outs)
  assert len(chief) == len(other) == 8
  apart = 0
  for a, b in zip(chief, other):
    # One replica per worker; the baseline's input is the mean over both.
    mean = np.mean(a['reward'] + b['reward'])
    np.testing.assert_allclose(a['step_baseline'] + b['step_baseline'],
                               [mean, mean], rtol=1e-6)
    apart += a['indices'] != b['indices']
  assert apart >= 6
  reader = tf.train.load_checkpoint(str(model_dir))
  assert reader.get_tensor('rlcontroller/baseline/count') == 8
  # Only the chief writes summaries: one events file of scalars.
  scalar_events = [f for f in os.listdir(model_dir) if f.endswith('.v2')]
  assert len(scalar_events) == 1, scalar_events
