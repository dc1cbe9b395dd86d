"""Tests for the TFDS datasets with tfds.testing.mock_data (no network)."""

import types

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tunas_search import data
from tunas_search.data import tfds_datasets


@pytest.fixture
def requested_splits(monkeypatch):
  """Records the split strings passed to builder.as_dataset."""
  splits = []
  original = tfds_datasets._as_dataset

  def spy(builder, split, **kwargs):
    splits.append((builder.name, split))
    return original(builder, split, **kwargs)

  monkeypatch.setattr(tfds_datasets, '_as_dataset', spy)
  return splits


def test_imagenet_search_reads_tunas_split(tmp_path, requested_splits):
  with tfds.testing.mock_data(num_examples=8):
    input_fn = data.SearchInputFn('imagenet', str(tmp_path), 64,
                                  validation_batch_multiplier=2, seed=0)
    features, labels = next(iter(input_fn({'batch_size': 2})))
  assert sorted(requested_splits) == [('imagenet2012', 'train[50046:]'),
                                      ('imagenet2012', 'train[:50046]')]
  assert features['train_images'].shape == (2, 64, 64, 3)
  assert features['validation_images'].shape == (4, 64, 64, 3)
  assert labels['validation_labels'].dtype == tf.int32
  assert 0 <= labels['train_labels'].numpy().min()
  assert labels['train_labels'].numpy().max() < 1000


def test_imagenet_info_and_test_split(tmp_path, requested_splits):
  info = data.get_info('imagenet')
  assert (info.num_classes, info.num_train, info.num_validation,
          info.num_test, info.num_train_full) == (
              1000, 1231121, 50046, 50000, 1281167)
  assert data.get_info('imagenet1001').num_classes == 1001
  with tfds.testing.mock_data(num_examples=4):
    input_fn = data.ClassifierInputFn('imagenet', str(tmp_path), 'test', 224,
                                      is_training=False)
    images, _ = next(iter(input_fn({'batch_size': 4})))
  assert requested_splits == [('imagenet2012', 'validation')]
  assert images.shape == (4, 224, 224, 3)


def test_cifar10_splits_and_batches(tmp_path, requested_splits):
  with tfds.testing.mock_data(num_examples=8):
    input_fn = data.SearchInputFn('cifar10', str(tmp_path), 32,
                                  num_validation=1000, seed=0)
    features, labels = next(iter(input_fn({'batch_size': 2})))
  assert sorted(requested_splits) == [('cifar10', 'train[1000:]'),
                                      ('cifar10', 'train[:1000]')]
  assert features['train_images'].shape == (2, 32, 32, 3)
  assert labels['train_labels'].numpy().max() < 10
  info = data.get_info('cifar10')
  assert (info.num_train, info.num_validation, info.num_test) == (
      45000, 5000, 10000)


def test_per_host_input_passes_input_context(tmp_path, monkeypatch):
  seen = []
  monkeypatch.setattr(tfds_datasets, '_as_dataset',
                      lambda builder, split, **kw: seen.append(kw) or
                      tf.data.Dataset.from_tensors(
                          (tf.zeros([32, 32, 3], tf.uint8),
                           tf.constant(1, tf.int64))))
  context = types.SimpleNamespace(
      current_input_fn_deployment=lambda: ('/cpu:0', 3, 4, 8))
  data.ClassifierInputFn('cifar10', str(tmp_path), 'test', 32, False)(
      {'batch_size': 1, 'context': context})
  input_context = seen[0]['read_config'].input_context
  assert (input_context.input_pipeline_id,
          input_context.num_input_pipelines) == (3, 4)


@pytest.mark.parametrize('name', ['imagenet', 'cifar10', 'tfds:mnist'])
def test_missing_and_empty_data_dir(tmp_path, name):
  with pytest.raises(data.DataError, match="needs a data_dir"):
    data.check_available(name, None)
  missing = str(tmp_path / 'absent')
  with pytest.raises(data.DataError, match=f'{missing} does not exist'):
    data.check_available(name, missing)
  with pytest.raises(data.DataError,
                     match=f'{tmp_path} has no prepared .*never downloads'):
    data.check_available(name, str(tmp_path))


def _fake_builder_info(height, num_train):
  features = {
      'image': tfds.features.Image(shape=(height, height, 1)),
      'label': tfds.features.ClassLabel(num_classes=7),
  }
  splits = {'train': types.SimpleNamespace(num_examples=num_train),
            'test': types.SimpleNamespace(num_examples=30)}
  return types.SimpleNamespace(supervised_keys=('image', 'label'),
                               features=features, splits=splits)


@pytest.mark.parametrize('height,augmentation,size', [
    (48, 'light', 48), (300, 'inception', 224), (20, 'light', 28)])
def test_generic_tfds_info(monkeypatch, height, augmentation, size):
  monkeypatch.setattr(tfds_datasets, 'check_tfds_available',
                      lambda *args: None)
  monkeypatch.setattr(
      tfds_datasets, '_builder', lambda name, data_dir: types.SimpleNamespace(
          info=_fake_builder_info(height, 1000)))
  source = data.get_source('tfds:my_images', '/data')
  info = source.info
  assert (info.num_classes, info.channels, info.num_train,
          info.num_validation, info.num_test) == (7, 1, 900, 100, 30)
  assert (info.augmentation, info.default_image_size) == (augmentation, size)
  assert source.split_names['validation'] == 'train[:100]'
  assert data.get_info('tfds:my_images', '/data',
                       num_validation=250).num_train == 750


def test_num_validation_out_of_range():
  with pytest.raises(data.DataError, match='num_validation'):
    data.get_source('cifar10', None, num_validation=50000)


def test_imagenet1001_labels_are_the_1000_class_labels_plus_one(monkeypatch):
  # TuNAS's 1001-way classifier keeps output 0 for a background class, so
  # TFDS's labels 0..999 must arrive as 1..1000 (docs/method.md section 6);
  # plain 'imagenet' keeps them. A fake builder serves fixed labels.
  tfds_labels = [0, 1, 417, 998, 999]
  monkeypatch.setattr(tfds_datasets, '_builder',
                      lambda name, data_dir: types.SimpleNamespace(name=name))
  monkeypatch.setattr(
      tfds_datasets, '_as_dataset', lambda builder, split, **kw:
      tf.data.Dataset.from_tensor_slices(
          (tf.zeros([len(tfds_labels)], tf.string),
           tf.constant(tfds_labels, tf.int64))))

  def labels(name, split):
    source = data.get_source(name, '/data')
    return [int(label) for _, label in source.examples(split)]

  for split in ('train', 'validation', 'test', 'train_full'):
    assert labels('imagenet', split) == tfds_labels, split
    assert labels('imagenet1001', split) == [1, 2, 418, 999, 1000], split
  assert data.get_info('imagenet1001').num_classes == 1001
