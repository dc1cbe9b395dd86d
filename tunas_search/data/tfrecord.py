"""`tfrecord:PATTERN`: TFRecord files of tf.train.Examples with an image.

Each Example holds the standard features `image/encoded` (PNG or JPEG
bytes) and `image/class/label` (int64), as TensorFlow's ImageNet and slim
conversion scripts write them. PATTERN is a file glob; if it contains
`{split}`, it names one set of files per split (`train`, `validation`,
`test`), otherwise only training files. Without validation files, the
first 10% of the training records (sorted file order) are held out for the
controller, as TuNAS holds out the first ImageNet images.

The training records are read once when the source is made: their labels
give the number of classes and the split sizes, and the first image gives
the channels and the default size. Labels must lie in [0, num_classes).
"""

from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from tunas_search.data import base
from tunas_search.data import image_files

PREFIX = 'tfrecord:'
SPLIT_FIELD = '{split}'
IMAGE_KEY = 'image/encoded'
LABEL_KEY = 'image/class/label'
DEFAULT_VALIDATION_FRACTION = 0.1
LIGHT_AUGMENTATION_MAX_SIZE = 64


def _records(paths: List[str]):
  """(file, index in file, tf.train.Example) of every record, in order."""
  for path in paths:
    try:
      for i, record in enumerate(tf.compat.v1.io.tf_record_iterator(path)):
        yield path, i, tf.train.Example.FromString(record)
    except (tf.errors.OpError, ValueError) as e:
      reason = getattr(e, 'message', None) or str(e)
      raise base.DataError(f'unreadable TFRecord file {path}: '
                           f'{reason.splitlines()[0]}') from None


def _feature(example, key: str, path: str, index: int):
  feature = example.features.feature
  if key not in feature:
    raise base.DataError(f'{path} record {index} has no {key!r} feature')
  value = (feature[key].bytes_list.value if key == IMAGE_KEY
           else feature[key].int64_list.value)
  if len(value) != 1:
    raise base.DataError(f'{path} record {index}: {key!r} must hold one '
                         'value')
  return value[0]


class TfrecordSource(base.DataSource):
  """The DataSource of `tfrecord:PATTERN` (see the module docstring)."""

  def __init__(self, name: str, num_validation: Optional[int] = None):
    pattern = name[len(PREFIX):]
    if not pattern:
      raise base.DataError(f'{name!r}: give a file pattern, '
                           'tfrecord:/path/train-*')
    self.pattern = pattern
    self.paths: Dict[str, List[str]] = {}
    for split in ('train', 'validation', 'test'):
      if SPLIT_FIELD in pattern:
        glob = pattern.replace(SPLIT_FIELD, split)
      else:
        glob = pattern if split == 'train' else None
      self.paths[split] = sorted(tf.io.gfile.glob(glob)) if glob else []
    if not self.paths['train']:
      raise base.DataError(f'no TFRecord files match '
                           f'{pattern.replace(SPLIT_FIELD, "train")}')
    labels, header = self._scan(self.paths['train'])
    num_classes = max(labels) + 1
    self.held_out = 0
    if self.paths['validation']:
      num_validation = sum(1 for _ in _records(self.paths['validation']))
      num_train = len(labels)
    else:
      if num_validation is None:
        num_validation = max(1, round(DEFAULT_VALIDATION_FRACTION *
                                      len(labels)))
      if not 0 < num_validation < len(labels):
        raise base.DataError(f'{name}: cannot hold out {num_validation} of '
                             f'its {len(labels)} training records')
      self.held_out = num_validation
      num_train = len(labels) - num_validation
    num_test = (sum(1 for _ in _records(self.paths['test']))
                if self.paths['test'] else None)
    mean, std = image_files.statistics(header.channels)
    small = max(header.height, header.width) <= LIGHT_AUGMENTATION_MAX_SIZE
    self.info = base.DatasetInfo(
        name=name, num_classes=max(num_classes, 2), channels=header.channels,
        default_image_size=image_files.default_image_size(header),
        num_train=num_train, num_validation=num_validation,
        num_test=num_test,
        augmentation=base.LIGHT if small else base.INCEPTION, mean=mean,
        std=std, description=f'TFRecords {pattern}')

  @staticmethod
  def _scan(paths: List[str]) -> Tuple[List[int], image_files.ImageHeader]:
    """Every training label, and the first image's header."""
    labels, header = [], None
    for path, index, example in _records(paths):
      label = _feature(example, LABEL_KEY, path, index)
      if label < 0:
        raise base.DataError(f'{path} record {index}: negative label '
                             f'{label}')
      labels.append(label)
      if header is None:
        try:
          header = image_files.parse_header(
              _feature(example, IMAGE_KEY, path, index))
        except ValueError as e:
          raise base.DataError(f'{path} record {index}: unreadable image: '
                               f'{e}') from None
    if not labels:
      raise base.DataError(f'TFRecord files {", ".join(paths)} hold no '
                           'records')
    return labels, header

  def check_available(self) -> None:
    """Checked when made (see __init__)."""

  def check_split(self, split: str) -> None:
    """See DataSource.check_split: 'test' needs test files."""
    base.check_split(split)
    if split == 'test' and not self.paths['test']:
      raise base.no_test_split(
          self.info.name, f'use a pattern with {SPLIT_FIELD} and test files')

  def examples(self, split: str, *, shuffle_files: bool = False,
               seed: Optional[int] = None,
               shard: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
    """See DataSource.examples: decoded uint8 [H, W, C] images."""
    self.check_split(split)
    held_out = bool(self.held_out)
    if split == 'train_full':
      paths = self.paths['train'] + self.paths['validation']
    elif split == 'validation' and held_out:
      paths = self.paths['train']
    else:
      paths = self.paths[split]
    # Held-out records are found by position, so their files keep order.
    ds = tf.data.Dataset.from_tensor_slices(paths)
    if shuffle_files and not held_out:
      ds = ds.shuffle(len(paths), seed=seed)
    ds = tf.data.TFRecordDataset(ds)
    if held_out and split == 'validation':
      ds = ds.take(self.held_out)
    elif held_out and split == 'train':
      ds = ds.skip(self.held_out)
    if shard is not None and shard[1] > 1:
      ds = ds.shard(shard[1], shard[0])
    channels = self.info.channels

    def parse(record):
      features = tf.io.parse_single_example(record, {
          IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
          LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)})
      image = tf.io.decode_image(features[IMAGE_KEY], channels=channels,
                                 expand_animations=False)
      return image, tf.cast(features[LABEL_KEY], tf.int32)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)

  def find_unreadable(self) -> Optional[Tuple[str, str]]:
    """('FILE record N', reason) of the first undecodable image, or None."""
    paths = sorted({p for ps in self.paths.values() for p in ps})
    records = _records(paths)
    return image_files.first_undecodable(
        (f'{path} record {index}', lambda e=example, p=path, i=index:
         _feature(e, IMAGE_KEY, p, i)) for path, index, example in records)
