"""estimators.mirrored_strategy: devices average shared-weight gradients.

Run in a fresh process: the logical CPU devices must exist before
TensorFlow starts. The same process then trains on one device, without a
strategy, for the weights to compare with.
"""

import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# One gradient-descent step of lr 1 on the same batch, over two mirrored
# devices and over one: averaged gradients give the same weights, summed
# ones a step twice as long. The loss is built the way search.py builds it.
_SCRIPT = '''
import sys
import tensorflow as tf
from tunas_search.runtime import estimators
tf1 = tf.compat.v1

def input_fn(params):
  del params
  return tf.data.Dataset.from_tensors(
      ({'x': tf.ones([2, 3])}, {'y': tf.zeros([2], tf.int32)})).repeat()

def model_fn(features, labels, mode, params):
  del params
  step = tf1.train.get_or_create_global_step()
  w = tf1.get_variable('w', [3, 2], initializer=tf1.ones_initializer())
  w2 = tf1.get_variable('w2', [2, 2], initializer=tf1.ones_initializer())
  logits = tf.matmul(tf.matmul(features['x'], w), w2)
  loss = tf1.losses.softmax_cross_entropy(tf.one_hot(labels['y'], 2), logits)
  loss += 1e-3 * tf.reduce_sum(tf.square(w))
  train = tf1.train.GradientDescentOptimizer(1.0).minimize(loss)
  with tf.control_dependencies([train]):
    return tf1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=step.assign_add(1))

def weights_after_one_step(model_dir, replicas):
  # The devices first: configuring them fails once TensorFlow has run.
  mirrored = estimators.mirrored_strategy(replicas) if replicas > 1 else None
  config = estimators.make_run_config(model_dir, False, 1, 1, 1, 1,
                                      mirrored=mirrored)
  tf1.estimator.tpu.TPUEstimator(
      model_fn=model_fn, config=config, use_tpu=False,
      train_batch_size=2 * replicas).train(
          estimators.per_replica_input_fn(input_fn, replicas), max_steps=1)
  reader = tf.train.load_checkpoint(model_dir)
  return repr(reader.get_tensor('w').tolist())

print(weights_after_one_step(sys.argv[1] + '/2', 2))
print(weights_after_one_step(sys.argv[1] + '/1', 1))
'''


def test_two_devices_average_the_gradients(tmp_path):
  done = subprocess.run(
      [sys.executable, '-c', _SCRIPT, str(tmp_path)], capture_output=True,
      text=True, check=False, cwd=_ROOT, env=dict(os.environ,
                                                  PYTHONPATH=_ROOT))
  assert done.returncode == 0, done.stderr[-3000:]
  two, one = done.stdout.strip().splitlines()[-2:]
  assert one == two
  assert one != repr([[1.0, 1.0]] * 3)  # The step moved the weights.
