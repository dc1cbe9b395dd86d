"""Tests for the embedded Fashion-MNIST subset: loader, held-out split, source."""

import os

import numpy as np
import pytest

from tunas_search import data
from tunas_search.data import embedded


@pytest.fixture(scope='module')
def arrays():
  return embedded.load_embedded()


@pytest.fixture(scope='module')
def source(tmp_path_factory):
  return embedded.EmbeddedSource(str(tmp_path_factory.mktemp('cache')))


def _collect(ds):
  """All (images, labels) of a finite dataset as two numpy arrays."""
  images, labels = ds.batch(20000).get_single_element()
  return images.numpy(), labels.numpy()


def test_loader_shapes_and_class_balance(arrays):
  assert arrays.train_images.shape == (12000, 28, 28)
  assert arrays.train_images.dtype == np.uint8
  assert arrays.test_images.shape == (2000, 28, 28)
  np.testing.assert_array_equal(np.bincount(arrays.train_labels), [1200] * 10)
  np.testing.assert_array_equal(np.bincount(arrays.test_labels), [200] * 10)
  # Source indices point into the official 60k / 10k sets, increasing.
  assert np.all(np.diff(arrays.train_source_indices) > 0)
  assert arrays.test_source_indices.max() < 10000


def test_loader_missing_file_is_one_clear_line(tmp_path):
  path = str(tmp_path / 'nothing.npz')
  with pytest.raises(data.DataError, match='nothing.npz is missing') as e:
    embedded.load_embedded(path)
  assert '\n' not in str(e.value)


def test_loader_rejects_wrong_shapes(tmp_path, arrays):
  path = str(tmp_path / 'bad.npz')
  fields = arrays._asdict()
  fields['train_images'] = fields['train_images'][:10]
  np.savez(path, **fields)
  with pytest.raises(data.DataError, match=r'train_images has shape \(10, 28'):
    embedded.load_embedded(path)


def test_held_out_is_last_images_of_each_class(arrays):
  labels = arrays.train_labels
  held_out = embedded.held_out_indices(labels, 2000)
  assert len(held_out) == 2000
  np.testing.assert_array_equal(np.bincount(labels[held_out]), [200] * 10)
  # Class 3's held-out images are its last 200 in file order.
  np.testing.assert_array_equal(held_out[labels[held_out] == 3],
                                np.flatnonzero(labels == 3)[-200:])
  # An uneven count gives the first classes one more image.
  np.testing.assert_array_equal(
      np.bincount(labels[embedded.held_out_indices(labels, 13)]),
      [2, 2, 2, 1, 1, 1, 1, 1, 1, 1])


def test_source_splits_are_disjoint_and_complete(source, arrays):
  train_images, train_labels = _collect(source.examples('train'))
  val_images, val_labels = _collect(source.examples('validation'))
  assert train_images.shape == (10000, 28, 28, 1)
  assert val_images.shape == (2000, 28, 28, 1)
  np.testing.assert_array_equal(np.bincount(val_labels), [200] * 10)
  np.testing.assert_array_equal(np.bincount(train_labels), [1000] * 10)
  held_out = embedded.held_out_indices(arrays.train_labels, 2000)
  np.testing.assert_array_equal(val_images[..., 0],
                                arrays.train_images[held_out])
  rest = np.setdiff1d(np.arange(12000), held_out)
  np.testing.assert_array_equal(train_images[..., 0],
                                arrays.train_images[rest])


def test_source_test_split_and_sharding(source, arrays):
  test_images, test_labels = _collect(source.examples('test'))
  np.testing.assert_array_equal(test_images[..., 0], arrays.test_images)
  np.testing.assert_array_equal(test_labels, arrays.test_labels)
  shard0 = _collect(source.examples('test', shard=(0, 2)))[1]
  shard1 = _collect(source.examples('test', shard=(1, 2)))[1]
  np.testing.assert_array_equal(shard0, arrays.test_labels[0::2])
  np.testing.assert_array_equal(shard1, arrays.test_labels[1::2])


def test_cache_files_hold_raw_bytes(source):
  source.examples('test')
  cache_dir = source._prepare()[0]
  assert os.path.getsize(os.path.join(cache_dir, 'train_images.bin')) == (
      12000 * 784)


def test_num_validation_is_configurable(tmp_path):
  info = data.get_info('embedded', str(tmp_path), num_validation=500)
  assert (info.num_train, info.num_validation, info.num_test) == (
      11500, 500, 2000)
  with pytest.raises(data.DataError, match='num_validation'):
    embedded.EmbeddedSource(num_validation=12000)
