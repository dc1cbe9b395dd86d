"""TFDS image-classification datasets read from a user-given data_dir, never downloaded."""

from typing import Dict, Optional, Tuple

import tensorflow as tf
import tensorflow_datasets as tfds

from tunas_search.data import base

# docs/method.md section 6, "ImageNet split" (TuNAS, Bender et al. 2020):
# the first 50,046 ImageNet training images are the controller's validation
# set, the remaining 1,231,121 train the shared weights; the official
# validation set (50,000) is the test set.
IMAGENET_NUM_VALIDATION = 50046
IMAGENET_NUM_TRAIN_FULL = 1281167
IMAGENET_NUM_TEST = 50000
CIFAR10_NUM_VALIDATION = 5000
# Channel statistics of the CIFAR-10 training images, in [0, 1].
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
# For 'tfds:NAME' without num_validation: hold out this fraction of train.
DEFAULT_VALIDATION_FRACTION = 0.1
# Datasets whose images are at most this large get the LIGHT augmentation:
# an Inception crop of 8% of a 32x32 image leaves about 9x9 pixels.
LIGHT_AUGMENTATION_MAX_SIZE = 64


def _as_dataset(builder: tfds.core.DatasetBuilder, split: str,
                **kwargs) -> tf.data.Dataset:
  """builder.as_dataset; one function so tests can see the split strings."""
  return builder.as_dataset(split=split, **kwargs)


def _builder(tfds_name: str, data_dir: str) -> tfds.core.DatasetBuilder:
  # try_gcs=False: read only from data_dir, never from Google's public bucket.
  return tfds.builder(tfds_name, data_dir=data_dir, try_gcs=False)


class TfdsSource(base.DataSource):
  """One TFDS dataset with a held-out validation split carved from 'train'.

  The held-out images are the FIRST num_validation images of the TFDS
  'train' split (as TuNAS does for ImageNet, docs/method.md section 6):
  'validation' reads 'train[:N]', 'train' reads 'train[N:]', 'train_full'
  reads 'train' and 'test' reads the official test split.
  """

  def __init__(self, info: base.DatasetInfo, tfds_name: str,
               data_dir: Optional[str], test_split: Optional[str],
               label_offset: int = 0, jpeg: bool = False):
    """Creates the source.

    Args:
      info: the DatasetInfo; info.num_validation is the held-out count.
      tfds_name: the TFDS builder name ('imagenet2012').
      data_dir: the TFDS data directory holding the prepared dataset.
      test_split: the TFDS split used as 'test', None if there is none.
      label_offset: added to every TFDS label (1 reserves label 0 for
        TuNAS's ImageNet background class).
      jpeg: the images are stored as JPEG; examples() then yields the encoded
        bytes so that training crops before decoding (much less work).
    """
    self.info = info
    self._tfds_name = tfds_name
    self._data_dir = data_dir
    self._label_offset = label_offset
    self._jpeg = jpeg
    num_validation = info.num_validation
    self.split_names: Dict[str, Optional[str]] = {
        'train': f'train[{num_validation}:]',
        'validation': f'train[:{num_validation}]',
        'test': test_split,
        'train_full': 'train',
    }

  def check_available(self) -> None:
    """Raises DataError unless data_dir holds the prepared TFDS dataset."""
    check_tfds_available(self.info.name, self._tfds_name, self._data_dir)

  def check_split(self, split: str) -> None:
    """See DataSource.check_split: 'test' needs a TFDS test or validation
    split."""
    base.check_split(split)
    if self.split_names[split] is None:
      raise base.no_test_split(
          f'dataset {self.info.name!r}',
          "its TFDS data has neither a 'test' nor a 'validation' split")

  def examples(self, split: str, *, shuffle_files: bool = False,
               seed: Optional[int] = None,
               shard: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
    """See DataSource.examples."""
    self.check_split(split)
    tfds_split = self.split_names[split]
    input_context = None
    if shard is not None and shard[1] > 1:
      # Shards whole files, so each host reads only its own files.
      input_context = tf.distribute.InputContext(
          num_input_pipelines=shard[1], input_pipeline_id=shard[0])
    read_config = tfds.ReadConfig(shuffle_seed=seed,
                                  input_context=input_context)
    decoders = {'image': tfds.decode.SkipDecoding()} if self._jpeg else None
    ds = _as_dataset(_builder(self._tfds_name, self._data_dir), tfds_split,
                     as_supervised=True, shuffle_files=shuffle_files,
                     read_config=read_config, decoders=decoders)
    offset = self._label_offset
    return ds.map(lambda image, label: (image, tf.cast(label, tf.int32) +
                                        offset),
                  num_parallel_calls=tf.data.AUTOTUNE)


def check_tfds_available(name: str, tfds_name: str,
                         data_dir: Optional[str]) -> None:
  """Raises DataError (one line) unless `data_dir` holds `tfds_name`."""
  where = f"dataset {name!r} (TFDS {tfds_name})"
  if not data_dir:
    raise base.DataError(f'{where} needs a data_dir: a TFDS data directory '
                         'where the dataset is already prepared')
  if not tf.io.gfile.isdir(data_dir):
    raise base.DataError(f'data_dir {data_dir} does not exist; {where} is '
                         'read from it and never downloaded')
  builder = _builder(tfds_name, data_dir)
  if not builder.is_prepared():
    raise base.DataError(
        f'data_dir {data_dir} has no prepared {tfds_name} for {where}; '
        f'tunas_search never downloads: prepare it first (e.g. `tfds build '
        f'{tfds_name} --data_dir={data_dir}`)')


def imagenet(data_dir: Optional[str], num_validation: Optional[int] = None,
             background_class: bool = False) -> TfdsSource:
  """ImageNet (ILSVRC-2012, TFDS imagenet2012) with TuNAS's split.

  TFDS labels are 0..999. TuNAS's classifier had 1001 outputs, output 0
  being an unused background class; background_class=True reproduces that
  (labels shifted to 1..1000, num_classes 1001). The default of 1000 classes
  gives the same accuracy with one fewer useless logit.
  """
  if num_validation is None:
    num_validation = IMAGENET_NUM_VALIDATION
  _check_num_validation('imagenet', num_validation, IMAGENET_NUM_TRAIN_FULL)
  info = base.DatasetInfo(
      name='imagenet1001' if background_class else 'imagenet',
      num_classes=1001 if background_class else 1000, channels=3,
      default_image_size=224,
      num_train=IMAGENET_NUM_TRAIN_FULL - num_validation,
      num_validation=num_validation, num_test=IMAGENET_NUM_TEST,
      description='ImageNet ILSVRC-2012 from TFDS imagenet2012')
  return TfdsSource(info, 'imagenet2012', data_dir, test_split='validation',
                    label_offset=int(background_class), jpeg=True)


def cifar10(data_dir: Optional[str],
            num_validation: Optional[int] = None) -> TfdsSource:
  """CIFAR-10 (TFDS cifar10); 5,000 training images held out by default."""
  if num_validation is None:
    num_validation = CIFAR10_NUM_VALIDATION
  _check_num_validation('cifar10', num_validation, 50000)
  info = base.DatasetInfo(
      name='cifar10', num_classes=10, channels=3, default_image_size=32,
      num_train=50000 - num_validation, num_validation=num_validation,
      num_test=10000, augmentation=base.LIGHT, mean=CIFAR10_MEAN,
      std=CIFAR10_STD, description='CIFAR-10 from TFDS cifar10')
  return TfdsSource(info, 'cifar10', data_dir, test_split='test')


def generic(name: str, data_dir: Optional[str],
            num_validation: Optional[int] = None) -> TfdsSource:
  """Any prepared TFDS image-classification dataset, named 'tfds:NAME'.

  Facts come from the prepared dataset's metadata, so data_dir must hold it.
  The test split is TFDS 'test', else 'validation', else none. Images of at
  most 64x64 pixels get the LIGHT augmentation, others the Inception one.
  The default held-out count is 10% of 'train'.

  Raises:
    DataError: if the data is missing or is not image classification.
  """
  tfds_name = name[len('tfds:'):]
  check_tfds_available(name, tfds_name, data_dir)
  builder_info = _builder(tfds_name, data_dir).info
  keys = builder_info.supervised_keys
  image, label = (builder_info.features[k] for k in keys) if keys else (
      None, None)
  if (not isinstance(image, tfds.features.Image) or
      not isinstance(label, tfds.features.ClassLabel) or
      'train' not in builder_info.splits):
    raise base.DataError(f'{name!r} is not a TFDS image-classification '
                         "dataset with a 'train' split and (image, label) "
                         'supervised keys')
  num_train_full = builder_info.splits['train'].num_examples
  if num_validation is None:
    num_validation = max(1, round(DEFAULT_VALIDATION_FRACTION *
                                  num_train_full))
  _check_num_validation(name, num_validation, num_train_full)
  test_split = next((s for s in ('test', 'validation')
                     if s in builder_info.splits), None)
  height, width, channels = image.shape
  small = bool(height and width and
               max(height, width) <= LIGHT_AUGMENTATION_MAX_SIZE)
  size = (height if height and height == width
          else base.MAX_DEFAULT_IMAGE_SIZE)
  info = base.DatasetInfo(
      name=name, num_classes=label.num_classes, channels=channels or 3,
      default_image_size=min(max(size, base.MIN_IMAGE_SIZE),
                             base.MAX_DEFAULT_IMAGE_SIZE),
      num_train=num_train_full - num_validation,
      num_validation=num_validation,
      num_test=(builder_info.splits[test_split].num_examples
                if test_split else None),
      augmentation=base.LIGHT if small else base.INCEPTION,
      description=f'TFDS {tfds_name}')
  return TfdsSource(info, tfds_name, data_dir, test_split=test_split,
                    jpeg=image.encoding_format == 'jpeg')


def _check_num_validation(name: str, num_validation: int,
                          num_train_full: int) -> None:
  if not 0 < num_validation < num_train_full:
    raise base.DataError(f'num_validation for {name!r} must be in (0, '
                         f'{num_train_full}), got {num_validation}')
