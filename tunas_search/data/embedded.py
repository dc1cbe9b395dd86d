"""The shipped default dataset: a class-balanced 14,000-image Fashion-MNIST subset."""

import hashlib
import os
import tempfile
from typing import NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from tunas_search.data import base

EMBEDDED_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             'fashion_mnist_subset.npz')
# sha256 of the shipped file (see README.md next to it).
EMBEDDED_SHA256 = (
    '85791ce66499e6eb13a39b4d7898f28f99bdea5c47d32b4e8b93263c83c38580')

NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28)
NUM_OFFICIAL_TRAIN = 12000
NUM_OFFICIAL_TEST = 2000
DEFAULT_NUM_VALIDATION = 2000
# Pixel statistics of the 12,000 training images of the shipped subset,
# computed once with numpy (values in [0, 1]).
MEAN = (0.2865,)
STD = (0.3539,)

class EmbeddedArrays(NamedTuple):
  """The arrays of fashion_mnist_subset.npz (see README.md for each key)."""
  train_images: np.ndarray  # uint8 [12000, 28, 28]
  train_labels: np.ndarray  # uint8 [12000]
  test_images: np.ndarray  # uint8 [2000, 28, 28]
  test_labels: np.ndarray  # uint8 [2000]
  train_source_indices: np.ndarray  # int32 [12000]
  test_source_indices: np.ndarray  # int32 [2000]


def load_embedded(path: str = EMBEDDED_PATH) -> EmbeddedArrays:
  """Loads the embedded dataset into numpy arrays, checking shapes and dtypes.

  Args:
    path: the .npz file; defaults to the copy shipped with the package.

  Returns:
    EmbeddedArrays.

  Raises:
    DataError: if the file is missing, unreadable or has unexpected content.
  """
  if not os.path.isfile(path):
    raise base.DataError(
        f"embedded dataset file {path} is missing (dataset 'embedded'); "
        'reinstall tunas_search or restore fashion_mnist_subset.npz')
  expected = {
      'train_images': ((NUM_OFFICIAL_TRAIN,) + IMAGE_SHAPE, np.uint8),
      'train_labels': ((NUM_OFFICIAL_TRAIN,), np.uint8),
      'test_images': ((NUM_OFFICIAL_TEST,) + IMAGE_SHAPE, np.uint8),
      'test_labels': ((NUM_OFFICIAL_TEST,), np.uint8),
      'train_source_indices': ((NUM_OFFICIAL_TRAIN,), np.int32),
      'test_source_indices': ((NUM_OFFICIAL_TEST,), np.int32),
  }
  try:
    with np.load(path, allow_pickle=False) as npz:
      arrays = {key: npz[key] for key in expected}
  except (OSError, ValueError, KeyError) as e:
    raise base.DataError(f'cannot read embedded dataset file {path}: {e}'
                         ) from None
  for key, (shape, dtype) in expected.items():
    if arrays[key].shape != shape or arrays[key].dtype != dtype:
      raise base.DataError(
          f'{path}: {key} has shape {arrays[key].shape} and dtype '
          f'{arrays[key].dtype}, expected {shape} and {np.dtype(dtype)}')
  for key in ('train_labels', 'test_labels'):
    if arrays[key].max() >= NUM_CLASSES:
      raise base.DataError(f'{path}: {key} has values >= {NUM_CLASSES}')
  return EmbeddedArrays(**arrays)


def held_out_indices(labels: np.ndarray, num_validation: int,
                     num_classes: int = NUM_CLASSES) -> np.ndarray:
  """Indices of the held-out validation images, class-balanced.

  Each class gives its last images in file order: class c gives
  num_validation // num_classes images, plus one more if
  c < num_validation % num_classes. Taking the last images by position alone
  would not be balanced: the subset's final 20 images are all class 0.

  Args:
    labels: int array [N] of labels in [0, num_classes).
    num_validation: how many images to hold out.
    num_classes: number of classes.

  Returns:
    Sorted int64 array [num_validation] of indices into `labels`.

  Raises:
    DataError: if some class has too few images.
  """
  picked = []
  for c in range(num_classes):
    count = num_validation // num_classes + int(c < num_validation % num_classes)
    of_class = np.flatnonzero(labels == c)
    if count > len(of_class) - 1:
      raise base.DataError(
          f'num_validation={num_validation} leaves no training image of '
          f'class {c} in the embedded dataset')
    picked.append(of_class[len(of_class) - count:])
  return np.sort(np.concatenate(picked)).astype(np.int64)


class EmbeddedSource(base.DataSource):
  """The shipped Fashion-MNIST subset as a DataSource.

  The images are never put into the graph as constants (that would add 11 MB
  to every GraphDef): on first use they are written once as raw bytes to a
  cache directory and read back by the input pipeline with tf.io.read_file,
  which also works on remote TPU hosts when the cache is on a bucket.
  """

  def __init__(self, data_dir: Optional[str] = None,
               num_validation: Optional[int] = None,
               path: str = EMBEDDED_PATH):
    """Creates the source.

    Args:
      data_dir: where the raw-bytes cache is written; default: the system
        temporary directory. Use a bucket path for remote TPU hosts.
      num_validation: held-out validation images carved from the 12,000
        official training images; default 2,000 (200 a class).
      path: the .npz file.
    """
    if num_validation is None:
      num_validation = DEFAULT_NUM_VALIDATION
    if not 0 < num_validation < NUM_OFFICIAL_TRAIN:
      raise base.DataError(f'num_validation must be in (0, '
                           f'{NUM_OFFICIAL_TRAIN}) for the embedded dataset, '
                           f'got {num_validation}')
    self._data_dir = data_dir or tempfile.gettempdir()
    self._path = path
    self._num_validation = num_validation
    self._cache = None  # (cache directory, held-out mask), set on first use.
    self.info = base.DatasetInfo(
        name='embedded', num_classes=NUM_CLASSES, channels=1,
        default_image_size=IMAGE_SHAPE[0],
        num_train=NUM_OFFICIAL_TRAIN - num_validation,
        num_validation=num_validation, num_test=NUM_OFFICIAL_TEST,
        augmentation=base.LIGHT, mean=MEAN, std=STD,
        description='shipped Fashion-MNIST subset (10 classes, 28x28x1)')

  def check_available(self) -> None:
    """Raises DataError if the .npz file is missing or malformed."""
    load_embedded(self._path)

  def _prepare(self) -> Tuple[str, np.ndarray]:
    """Writes the raw-bytes cache if needed; returns (dir, held-out mask)."""
    if self._cache is not None:
      return self._cache
    arrays = load_embedded(self._path)
    with open(self._path, 'rb') as f:
      digest = hashlib.sha256(f.read()).hexdigest()
    cache_dir = os.path.join(self._data_dir,
                             f'tunas_search_embedded_{digest[:16]}')
    tf.io.gfile.makedirs(cache_dir)
    for key in ('train_images', 'train_labels', 'test_images', 'test_labels'):
      target = os.path.join(cache_dir, key + '.bin')
      if not tf.io.gfile.exists(target):
        # Write then rename, so a concurrent reader never sees half a file.
        tmp = f'{target}.tmp{os.getpid()}'
        with tf.io.gfile.GFile(tmp, 'wb') as f:
          f.write(getattr(arrays, key).tobytes())
        tf.io.gfile.rename(tmp, target, overwrite=True)
    mask = np.zeros(NUM_OFFICIAL_TRAIN, bool)
    mask[held_out_indices(arrays.train_labels, self._num_validation)] = True
    self._cache = (cache_dir, mask)
    return self._cache

  def examples(self, split: str, *, shuffle_files: bool = False,
               seed: Optional[int] = None,
               shard: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
    """See DataSource.examples; images are uint8 [28, 28, 1]."""
    del shuffle_files, seed  # One file per split: nothing to shuffle.
    base.check_split(split)
    cache_dir, held_out = self._prepare()
    part = 'test' if split == 'test' else 'train'
    keep = np.ones(NUM_OFFICIAL_TEST if part == 'test' else NUM_OFFICIAL_TRAIN,
                   bool)
    if split in ('train', 'validation'):
      keep = held_out if split == 'validation' else ~held_out
    indices = np.flatnonzero(keep).astype(np.int32)
    if shard is not None:
      indices = indices[shard[0]::shard[1]]
    image_file = os.path.join(cache_dir, f'{part}_images.bin')
    label_file = os.path.join(cache_dir, f'{part}_labels.bin')

    def read_split(_):
      # Reads the files when the pipeline runs (no images in the graph; the
      # index list is at most 48 kB), then selects the split's examples.
      images = tf.io.decode_raw(tf.io.read_file(image_file), tf.uint8)
      images = tf.reshape(images, (-1,) + IMAGE_SHAPE + (1,))
      labels = tf.io.decode_raw(tf.io.read_file(label_file), tf.uint8)
      return (tf.gather(images, indices),
              tf.cast(tf.gather(labels, indices), tf.int32))

    # unbatch() slices the arrays into examples in one vectorised step. No
    # .cache(): rereading the files costs nothing measurable (5 epochs in
    # 0.35 s either way), and a cache stopped early by `take` (one-shot
    # scoring) logs a TensorFlow warning every time.
    return tf.data.Dataset.from_tensors(0).map(read_split).unbatch()
