"""File helpers of tests: what a dir holds, checkpoints made to order, and
scripts outside the packages loaded as modules."""

import importlib.util
import os
import types
from typing import Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(*path: str) -> types.ModuleType:
  """The script at `path` (relative to the repository root) as a module.

  For `bench/` scripts, which are not in a package; loading runs only their
  top level (`main` is behind `if __name__ == '__main__'`).
  """
  location = os.path.join(ROOT, *path)
  name = os.path.splitext(os.path.basename(location))[0]
  spec = importlib.util.spec_from_file_location(name, location)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


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
