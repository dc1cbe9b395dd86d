"""Records what every replica of a search sampled and earned, step by step.

Used in-process (one replica) and by `python tests/e2e/replicas.py`, which
runs a tiny search over several logical CPU devices in a fresh process (a
process must configure its devices before TensorFlow starts), or as one
worker of a multi-worker search, and writes the record as JSON.
"""

import json
import os
import sys

import tensorflow as tf

if __name__ == '__main__':  # Run as a script: make the repo importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))

from tests.e2e import tiny  # pylint: disable=g-import-not-at-top
from tunas_search.search import runner  # pylint: disable=g-import-not-at-top
from tunas_search.search import model_fn as search  # pylint: disable=g-import-not-at-top

tf1 = tf.compat.v1


class ReplicaRecorder(tf1.train.SessionRunHook):
  """Per step: each replica's sampled indices, reward and step baseline."""

  def __init__(self):
    self.steps = []

  def before_run(self, run_context):
    return tf1.train.SessionRunArgs({
        key: tf1.get_collection(key)
        for key in (search.SAMPLED_INDICES, search.REPLICA_REWARD,
                    search.STEP_BASELINE)})

  def after_run(self, run_context, run_values):
    r = run_values.results
    self.steps.append({
        'indices': [[int(i) for i in x] for x in r[search.SAMPLED_INDICES]],
        'reward': [float(x) for x in r[search.REPLICA_REWARD]],
        'step_baseline': [float(x) for x in r[search.STEP_BASELINE]]})


def record_search(model_dir: str, **overrides) -> list:
  """Runs a tiny search; returns the recorder's steps."""
  recorder = ReplicaRecorder()
  runner.run_search(tiny.tiny_config(model_dir, **overrides), tiny.tiny_spec(),
                    hooks=[recorder])
  return recorder.steps


def main(argv):
  """replicas.py MODEL_DIR OUT REPLICAS SEED [WORKER PORT,PORT,...]

  With WORKER and the ports, runs as that worker of a multi-worker search on
  localhost (one replica per worker).
  """
  model_dir, out, replicas, seed = argv[1], argv[2], int(argv[3]), int(argv[4])
  overrides = {}
  if len(argv) > 5:
    worker, ports = int(argv[5]), argv[6].split(',')
    os.environ['TF_CONFIG'] = json.dumps({
        'cluster': {'worker': [f'localhost:{p}' for p in ports]},
        'task': {'type': 'worker', 'index': worker}})
    overrides['multi_worker'] = True
  steps = record_search(model_dir, num_replicas=replicas, seed=seed,
                        train_batch_size=2 * replicas, max_steps=8,
                        **overrides)
  with open(out, 'w') as f:
    json.dump(steps, f)


if __name__ == '__main__':
  main(sys.argv)
