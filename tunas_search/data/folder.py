"""`folder:PATH`: a folder of PNG/JPEG images, one subfolder per class.

Layout (class names are the subfolder names, labels their sorted order):

  PATH/<class>/*.png|jpg|jpeg     training images (or PATH/train/<class>/...)
  PATH/validation/<class>/...     optional: the controller's validation set;
                                  without it, a fixed held-out fraction of
                                  the training images is
  PATH/test/<class>/...           optional: train_eval's test split

Every file's header is read when the source is made, so an empty folder, a
class without images, a file that is no PNG or JPEG and classes that differ
between the splits are one-line DataErrors before anything is written.
Images stream through tf.data and the same preprocessing as the TFDS
datasets; one that is damaged past its header fails while streaming, and
`find_unreadable` then names it.
"""

import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from tunas_search.data import base
from tunas_search.data import image_files

PREFIX = 'folder:'
TRAIN, VALIDATION, TEST = 'train', 'validation', 'test'
# Without a validation/ folder, this fraction of the training images (as
# tfds_datasets.DEFAULT_VALIDATION_FRACTION) is held out...
DEFAULT_VALIDATION_FRACTION = 0.1
# ...chosen by a permutation with this fixed seed, so every run of a folder
# holds out the same images whatever --seed is.
HOLD_OUT_SEED = 0
# Images of at most this side get the light augmentation (as TFDS ones).
LIGHT_AUGMENTATION_MAX_SIZE = 64

Files = List[Tuple[str, int]]  # (path, label)


def _subfolders(directory: str) -> List[str]:
  return sorted(name.rstrip('/') for name in tf.io.gfile.listdir(directory)
                if tf.io.gfile.isdir(os.path.join(directory, name)))


def _images(directory: str) -> List[str]:
  return sorted(os.path.join(directory, name)
                for name in tf.io.gfile.listdir(directory)
                if name.lower().endswith(image_files.IMAGE_EXTENSIONS))


def list_classes(directory: str, exclude: Tuple[str, ...] = ()
                 ) -> Dict[str, List[str]]:
  """{class name: sorted image paths} of one split's folder.

  Raises:
    DataError: naming the folder if it is missing or has no class folders,
      or naming the class folder that holds no PNG or JPEG image.
  """
  if not tf.io.gfile.isdir(directory):
    raise base.DataError(f'image folder {directory} does not exist')
  classes = [c for c in _subfolders(directory) if c not in exclude]
  if not classes:
    raise base.DataError(f'image folder {directory} has no class folders '
                         '(expected one subfolder of images per class)')
  found = {}
  for name in classes:
    found[name] = _images(os.path.join(directory, name))
    if not found[name]:
      raise base.DataError(
          f'class folder {os.path.join(directory, name)} has no images '
          f'({", ".join(image_files.IMAGE_EXTENSIONS)})')
  return found


def _check_same_classes(directory: str, classes: Dict[str, List[str]],
                        train_classes: List[str]) -> None:
  missing = sorted(set(train_classes) - set(classes))
  extra = sorted(set(classes) - set(train_classes))
  if missing or extra:
    what = (f'has no folder for class(es) {", ".join(missing)}' if missing
            else f'has class(es) {", ".join(extra)} that training lacks')
    raise base.DataError(f'image folder {directory} {what}; its classes must '
                         f'be the training classes: {", ".join(train_classes)}')


def _labelled(classes: Dict[str, List[str]], names: List[str]) -> Files:
  return [(path, names.index(c)) for c in names for path in classes[c]]


class FolderSource(base.DataSource):
  """The DataSource of `folder:PATH` (see the module docstring)."""

  def __init__(self, name: str, num_validation: Optional[int] = None):
    """Lists and checks the folder.

    Args:
      name: 'folder:PATH'.
      num_validation: held-out training images when there is no
        validation/ folder (default 10%, at least 1).

    Raises:
      DataError: for anything the module docstring lists.
    """
    root = name[len(PREFIX):]
    if not root:
      raise base.DataError(f'{name!r}: give the folder, folder:PATH')
    self.root = root
    if tf.io.gfile.isdir(os.path.join(root, TRAIN)):
      train_dir, exclude = os.path.join(root, TRAIN), ()
    else:
      train_dir, exclude = root, (TRAIN, VALIDATION, TEST)
    train = list_classes(train_dir, exclude)
    names = sorted(train)
    self.splits: Dict[str, Optional[Files]] = {}
    files = _labelled(train, names)
    validation_dir = os.path.join(root, VALIDATION)
    if tf.io.gfile.isdir(validation_dir):
      validation = list_classes(validation_dir)
      _check_same_classes(validation_dir, validation, names)
      self.splits[VALIDATION] = _labelled(validation, names)
      self.splits[TRAIN] = files
    else:
      held_out = self._held_out(name, len(files), num_validation)
      self.splits[VALIDATION] = [files[i] for i in sorted(held_out)]
      self.splits[TRAIN] = [f for i, f in enumerate(files)
                            if i not in held_out]
    self.splits['train_full'] = self.splits[TRAIN] + self.splits[VALIDATION]
    test_dir = os.path.join(root, TEST)
    self.splits[TEST] = None
    if tf.io.gfile.isdir(test_dir):
      test = list_classes(test_dir)
      _check_same_classes(test_dir, test, names)
      self.splits[TEST] = _labelled(test, names)
    self.info = self._info(name, names)

  @staticmethod
  def _held_out(name: str, count: int, num_validation: Optional[int]):
    if num_validation is None:
      num_validation = max(1, round(DEFAULT_VALIDATION_FRACTION * count))
    if not 0 < num_validation < count:
      raise base.DataError(f'{name}: cannot hold out {num_validation} of its '
                           f'{count} training images for validation')
    order = np.random.default_rng(HOLD_OUT_SEED).permutation(count)
    return set(order[:num_validation].tolist())

  def _info(self, name: str, class_names: List[str]) -> base.DatasetInfo:
    """Reads every header: channels and size, and the files are images."""
    headers = [image_files.read_header(path)
               for split in (TRAIN, VALIDATION, TEST)
               for path, _ in self.splits[split] or ()]
    channels = max(h.channels for h in headers)
    first = headers[0]
    mean, std = image_files.statistics(channels)
    small = max(first.height, first.width) <= LIGHT_AUGMENTATION_MAX_SIZE
    test = self.splits[TEST]
    return base.DatasetInfo(
        name=name, num_classes=len(class_names), channels=channels,
        default_image_size=image_files.default_image_size(first),
        num_train=len(self.splits[TRAIN]),
        num_validation=len(self.splits[VALIDATION]),
        num_test=len(test) if test is not None else None,
        augmentation=base.LIGHT if small else base.INCEPTION, mean=mean,
        std=std, description=f'images in {self.root}',
        class_names=tuple(class_names))

  def check_available(self) -> None:
    """Checked when made (see __init__)."""

  def check_split(self, split: str) -> None:
    """See DataSource.check_split: 'test' needs a test/ folder."""
    base.check_split(split)
    if self.splits[split] is None:
      raise base.no_test_split(
          self.info.name, f'add a {os.path.join(self.root, TEST)} folder '
          'with the same class folders')

  def files(self, split: str) -> Files:
    """(path, label) of `split`, in order.

    Raises:
      DataError: for a test split without a test/ folder.
    """
    self.check_split(split)
    return self.splits[split]

  def examples(self, split: str, *, shuffle_files: bool = False,
               seed: Optional[int] = None,
               shard: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
    """See DataSource.examples: decoded uint8 [H, W, C] images."""
    found = self.files(split)
    ds = tf.data.Dataset.from_tensor_slices((
        [p for p, _ in found], np.array([l for _, l in found], np.int32)))
    if shard is not None and shard[1] > 1:
      ds = ds.shard(shard[1], shard[0])
    if shuffle_files:
      ds = ds.shuffle(len(found), seed=seed, reshuffle_each_iteration=True)
    channels = self.info.channels

    def decode(path, label):
      image = tf.io.decode_image(tf.io.read_file(path), channels=channels,
                                 expand_animations=False)
      return image, label
    return ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)

  def find_unreadable(self) -> Optional[Tuple[str, str]]:
    """(path, reason) of the first image TensorFlow cannot decode, or None."""
    paths = sorted({p for split in (TRAIN, VALIDATION, TEST)
                    for p, _ in self.splits[split] or ()})
    return image_files.first_undecodable(
        (p, lambda p=p: tf.io.gfile.GFile(p, 'rb').read()) for p in paths)
