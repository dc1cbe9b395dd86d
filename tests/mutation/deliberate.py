"""`make mutation-tf`: deliberate bugs in code mutmut leaves out, each caught.

mutmut cannot mutate the TensorFlow modules (its forked workers cannot run
TensorFlow, docs/mutation.md), so this list holds hand-written bugs of the
kind users would not see until their results were wrong: a metric that
reports the wrong number, an augmentation that silently stops, labels
shifted by one, a supernet form that computes another width (issue 52).
Each names the tests that must fail with it. In a scratch copy of the tree
(never the working tree), the named tests must first pass unchanged; then
each bug is applied alone, its tests run, and the file restored. Prints one
line per bug and exits 1 if any survives or no longer applies (its code
changed: update the entry).
"""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from typing import List, Tuple

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_SKIPPED = ('.git', 'build', '.venv', '__pycache__', '.pytest_cache')


@dataclasses.dataclass(frozen=True)
class Bug:
  """One deliberate bug: replace `old` (found exactly once) by `new`."""
  name: str
  path: str
  old: str
  new: str
  tests: Tuple[str, ...]


BUGS = (
    # The three of issue 52.
    Bug('top-5 accuracy is a top-3 accuracy',
        'tunas_search/standalone/model_fn.py',
        'k_used = min(k, int(logits.shape[-1]))',
        'k_used = min(k, 3, int(logits.shape[-1]))',
        ('tests/standalone/test_model_fn.py',)),
    Bug('Inception crops never flip', 'tunas_search/data/preprocessing.py',
        'image = tf.image.stateless_random_flip_left_right(image, seeds[1])',
        'image = image', ('tests/data/test_preprocessing.py',)),
    Bug('imagenet1001 loses the background-class shift',
        'tunas_search/data/tfds_datasets.py',
        'label_offset=int(background_class)', 'label_offset=0',
        ('tests/data/test_tfds_datasets.py',)),
    # Their kind elsewhere.
    Bug('top-k off by one', 'tunas_search/standalone/model_fn.py',
        'k_used = min(k, int(logits.shape[-1]))',
        'k_used = min(k + 1, int(logits.shape[-1]))',
        ('tests/standalone/test_model_fn.py',)),
    Bug('evaluation loss with label smoothing',
        'tunas_search/standalone/model_fn.py',
        'tf.one_hot(labels, config.num_classes), logits)',
        'tf.one_hot(labels, config.num_classes), logits, '
        'label_smoothing=0.1)',
        ('tests/standalone/test_model_fn.py',)),
    Bug('reported top-5 is the top-1', 'tunas_search/standalone/train_eval.py',
        "top_5_accuracy=float(metrics['top_5_accuracy'])",
        "top_5_accuracy=float(metrics['top_1_accuracy'])",
        ('tests/standalone/test_train_eval.py',)),
    Bug('TPU evaluation reports every example, not whole batches',
        'tunas_search/standalone/train_eval.py',
        'size = steps * config.eval_batch_size', 'size = size',
        ('tests/standalone/test_train_eval.py',)),
    Bug('light augmentation never flips', 'tunas_search/data/preprocessing.py',
        'return tf.image.stateless_random_flip_left_right(image, seeds[1])',
        'return image', ('tests/data/test_preprocessing.py',)),
    Bug('Inception crops always flip', 'tunas_search/data/preprocessing.py',
        'image = tf.image.stateless_random_flip_left_right(image, seeds[1])',
        'image = tf.image.flip_left_right(image)',
        ('tests/data/test_preprocessing.py',)),
    Bug('light augmentation flips upside down',
        'tunas_search/data/preprocessing.py',
        'return tf.image.stateless_random_flip_left_right(image, seeds[1])',
        'return tf.image.stateless_random_flip_up_down(image, seeds[1])',
        ('tests/data/test_preprocessing.py',)),
    Bug('normalisation multiplies by the std',
        'tunas_search/data/preprocessing.py',
        'return (tf.cast(image, tf.float32) - mean) / std',
        'return (tf.cast(image, tf.float32) - mean) * std',
        ('tests/data/test_preprocessing.py',)),
    Bug('search reward scored on the training labels',
        'tunas_search/search/step.py',
        '                       batch.validation_labels)',
        '                       batch.train_labels)',
        ('tests/e2e/test_step_numbers.py',)),
    Bug('exported latency is the mean, not the median',
        'tunas_search/runtime/tflite.py',
        'return Latency(statistics.median(times),',
        'return Latency(statistics.mean(times),',
        ('tests/runtime/test_tflite.py',)),
    Bug('sampled form computes the wrong width',
        'tunas_search/supernet/widths.py',
        'coefs * tf.constant(list(merged), tf.float32)',
        'coefs * tf.constant(list(merged)[::-1], tf.float32)',
        ('tests/supernet/test_sampled_widths.py',)),
    Bug("batch norm's beta escapes the channel mask",
        'tunas_search/supernet/ops.py',
        'gamma, beta = gamma * scale, beta * scale',
        'gamma, beta = gamma * scale, beta',
        ('tests/supernet/test_sampled_widths.py',)),
    Bug("weight decay ignores the input channels' mask",
        'tunas_search/supernet/weights.py',
        '    if in_mask is not None:\n      w *=',
        '    if in_mask is not None and False:\n      w *=',
        ('tests/supernet/test_sampled_widths.py',)),
)


def _prepare(work_dir: str) -> None:
  """A fresh copy of the tree (the venv linked, not copied)."""
  shutil.rmtree(work_dir, ignore_errors=True)
  shutil.copytree(_ROOT, work_dir, symlinks=True,
                  ignore=shutil.ignore_patterns(*_SKIPPED))
  venv = os.path.join(_ROOT, '.venv')
  if os.path.exists(venv):
    os.symlink(os.path.realpath(venv), os.path.join(work_dir, '.venv'))


def _pytest(work_dir: str, tests: List[str]) -> int:
  """Runs the fast tests among `tests` in `work_dir`; returns pytest's rc."""
  command = [sys.executable, '-m', 'pytest', '-q', '-x', '-m',
             'not slow'] + tests
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run(command, cwd=work_dir, env=env,
                         stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL).returncode


def _try(work_dir: str, bug: Bug) -> str:
  """'caught', 'SURVIVED', 'ERROR' (pytest could not run the tests) or
  'STALE' (the bug's code is no longer there exactly once)."""
  path = os.path.join(work_dir, bug.path)
  with open(path, encoding='utf-8') as f:
    source = f.read()
  if source.count(bug.old) != 1:
    return 'STALE'
  try:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(source.replace(bug.old, bug.new))
    # pytest's 1: a test failed. 0 (and 5, all deselected as slow): none
    # did. Anything else (collection or usage errors) says nothing.
    code = _pytest(work_dir, list(bug.tests))
    return {1: 'caught', 0: 'SURVIVED', 5: 'SURVIVED'}.get(code, 'ERROR')
  finally:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(source)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--work_dir', default=os.path.join(
      _ROOT, 'build', 'mutation-tf'), help='scratch copy of the tree')
  parser.add_argument('--only', default='', help='bugs whose name contains '
                      'this text')
  parser.add_argument('--list', action='store_true', help='list the bugs')
  args = parser.parse_args()
  bugs = [b for b in BUGS if args.only in b.name]
  if args.list or not bugs:
    for bug in BUGS:
      print(f'{bug.name}  ({bug.path}; {", ".join(bug.tests)})')
    return 0 if bugs else 2
  _prepare(args.work_dir)
  tests = sorted({t for b in bugs for t in b.tests})
  if _pytest(args.work_dir, tests) != 0:
    print(f'the tests fail without any bug: {" ".join(tests)}')
    return 1
  failed = 0
  for bug in bugs:
    began = time.monotonic()
    verdict = _try(args.work_dir, bug)
    failed += verdict != 'caught'
    print(f'{verdict:<9}{bug.name} ({bug.path}; {", ".join(bug.tests)}; '
          f'{time.monotonic() - began:.0f} s)', flush=True)
  print(f'deliberate bugs caught: {len(bugs) - failed} of {len(bugs)}')
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())
