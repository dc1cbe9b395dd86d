"""Shared data types: DatasetInfo, the DataSource interface and DataError."""

import abc
import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

# The one statement of the input-size limits is config's (`check_image_size`);
# re-exported here for the data code.
from tunas_search.config import MAX_IMAGE_SIZE  # pylint: disable=unused-import
from tunas_search.config import MIN_IMAGE_SIZE  # pylint: disable=unused-import

# The largest input side a dataset defaults to (its images' side, capped):
# TuNAS's 224 (docs/method.md section 3). Larger inputs, up to
# MAX_IMAGE_SIZE, only when asked for (--image_size).
MAX_DEFAULT_IMAGE_SIZE = 224

# Split names used everywhere in tunas_search.data:
#   'train'      the part of the official training set that trains the weights
#                (shared weights during a search, or a stand-alone model);
#   'validation' the held-out part of the official training set: the
#                controller's reward during a search (docs/method.md
#                section 6, "ImageNet split");
#   'test'       the official test/validation set, for final evaluation only;
#   'train_full' the whole official training set ('train' + 'validation').
SPLITS = ('train', 'validation', 'test', 'train_full')

# Augmentation families (see preprocessing.py). 'inception' is the ImageNet
# recipe of docs/method.md section 6, "Preprocessing"; 'light' is for small,
# low-resolution images.
INCEPTION = 'inception'
LIGHT = 'light'

# Channel statistics of ImageNet RGB images in [0, 1] (the widely used values
# of the ILSVRC-2012 training set); also the default for unknown datasets.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DataError(ValueError):
  """A dataset cannot be read: missing data, bad arguments or a bad file."""


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """Static facts about one dataset as tunas_search splits it.

  Attributes:
    name: the tunas_search dataset name ('embedded', 'imagenet', 'tfds:mnist').
    num_classes: number of label values; labels are int32 in [0, num_classes).
    channels: image channels (1 for grayscale, 3 for RGB).
    default_image_size: the natural square input resolution.
    num_train: examples in the 'train' split, None if unknown.
    num_validation: examples in the held-out 'validation' split.
    num_test: examples in the 'test' split, None if unknown or absent.
    augmentation: INCEPTION or LIGHT (training augmentation family).
    mean: per-channel mean of pixel values scaled to [0, 1].
    std: per-channel standard deviation of pixel values scaled to [0, 1].
    description: one line for --help texts and logs.
    class_names: the name of each label, where the dataset has names
      (folder:PATH); empty otherwise.
  """
  name: str
  num_classes: int
  channels: int
  default_image_size: int
  num_train: Optional[int]
  num_validation: Optional[int]
  num_test: Optional[int]
  augmentation: str = INCEPTION
  mean: Tuple[float, ...] = IMAGENET_MEAN
  std: Tuple[float, ...] = IMAGENET_STD
  description: str = ''
  class_names: Tuple[str, ...] = ()

  @property
  def num_train_full(self) -> Optional[int]:
    """Examples in the whole official training set, None if unknown."""
    if self.num_train is None or self.num_validation is None:
      return None
    return self.num_train + self.num_validation

  def num_examples(self, split: str) -> Optional[int]:
    """Number of examples in `split` (one of SPLITS), None if unknown."""
    check_split(split)
    return {'train': self.num_train, 'validation': self.num_validation,
            'test': self.num_test, 'train_full': self.num_train_full}[split]


class DataSource(abc.ABC):
  """Reads the raw examples of one dataset; preprocessing happens elsewhere."""

  info: DatasetInfo

  @abc.abstractmethod
  def check_available(self) -> None:
    """Raises DataError (one clear line) if the data cannot be read."""

  def check_split(self, split: str) -> None:
    """Raises DataError (one line) unless this dataset has `split`.

    Every dataset has 'train', 'validation' (held out of the official
    training set where the data has none) and 'train_full'; sources
    without a test split override this.
    """
    check_split(split)

  @abc.abstractmethod
  def examples(self, split: str, *, shuffle_files: bool = False,
               seed: Optional[int] = None,
               shard: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
    """Returns one pass over the raw examples of `split`, in stored order.

    Args:
      split: one of SPLITS.
      shuffle_files: whether the order of input files may be shuffled.
      seed: seed for file shuffling, None for non-deterministic.
      shard: (index, count): keep only this host's 1/count of the examples.

    Returns:
      A dataset of (image, label). image is uint8 [H, W, C], or a scalar
      tf.string holding a JPEG (decoded later, cropping first); label is a
      scalar int32.
    """


def check_split(split: str) -> None:
  """Raises DataError unless `split` is one of SPLITS."""
  if split not in SPLITS:
    raise DataError(f'unknown split {split!r}; valid splits: '
                    f'{", ".join(SPLITS)}')


def no_test_split(name: str, advice: str) -> DataError:
  """The error for a dataset without a test split, naming those it has."""
  others = ', '.join(s for s in SPLITS if s != 'test')
  return DataError(f'{name} has no test split (its splits: {others}); '
                   f'{advice}, or evaluate on validation '
                   '(--eval_split=validation)')


def validate_image_size(image_size: int) -> int:
  """Returns `image_size` if it is an integer in [MIN_IMAGE_SIZE,
  MAX_IMAGE_SIZE].

  Raises:
    DataError: naming the bad value and the valid range.
  """
  if (isinstance(image_size, bool) or not isinstance(image_size, int) or
      not MIN_IMAGE_SIZE <= image_size <= MAX_IMAGE_SIZE):
    raise DataError(f'image_size must be an integer in [{MIN_IMAGE_SIZE}, '
                    f'{MAX_IMAGE_SIZE}], got {image_size!r}')
  return image_size
