"""File helpers of tests: what a dir holds, and checkpoints made to order."""

import os
from typing import Dict


def snapshot(directory: str) -> Dict[str, bytes]:
  """Relative path -> bytes of every file under `directory`."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, directory)] = f.read()
  return files


def rewrite_checkpoint_without(prefix: str, name: str) -> None:
  """Rewrites the checkpoint `prefix` with every variable except `name`.

  A whole checkpoint that a graph with other variables (another version)
  could have written.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(prefix)
  with tf.Graph().as_default():
    kept = [tf.compat.v1.Variable(reader.get_tensor(n), name=n)
            for n in sorted(reader.get_variable_to_shape_map()) if n != name]
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver(kept).save(session, prefix,
                                          write_meta_graph=False,
                                          write_state=False)
