"""Tests for SearchInputFn and ClassifierInputFn on the embedded dataset."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from tunas_search import config
from tunas_search import data
from tunas_search import registry
from tunas_search.data import embedded


@pytest.fixture(scope='module')
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp('embedded_cache'))


@pytest.fixture(scope='module')
def arrays():
  return embedded.load_embedded()


def _hashes(images):
  return {hashlib.sha1(np.ascontiguousarray(i).tobytes()).hexdigest()
          for i in images}


def _unnormalize(images):
  """float32 [N, 28, 28, 1] normalised -> uint8 [N, 28, 28]."""
  pixels = (images * embedded.STD[0] + embedded.MEAN[0]) * 255.
  return np.round(pixels[..., 0]).astype(np.uint8)


def test_search_batch_shapes_dtypes_and_labels(cache_dir):
  input_fn = data.SearchInputFn('embedded', cache_dir, 32, seed=3,
                                shuffle_buffer=500)
  features, labels = next(iter(input_fn({'batch_size': 8})))
  assert features['train_images'].shape == (8, 32, 32, 1)
  assert features['validation_images'].shape == (32, 32, 32, 1)
  assert features['train_images'].dtype == tf.float32
  assert labels['train_labels'].dtype == tf.int32
  assert labels['validation_labels'].shape == (32,)
  for value in labels.values():
    assert 0 <= value.numpy().min() and value.numpy().max() <= 9
  # Normalised pixels: 0 maps to -mean/std = -0.81, computed in float32 by
  # the pipeline (ulp 6e-8); 1e-4 also covers a different operation order.
  assert features['train_images'].numpy().min() == pytest.approx(
      -embedded.MEAN[0] / embedded.STD[0], abs=1e-4)


def test_search_validation_only_from_held_out_split(cache_dir, arrays):
  input_fn = data.SearchInputFn('embedded', cache_dir, 28, seed=0,
                                augment=False)
  train, validation = [], []
  for features, _ in input_fn({'batch_size': 50}).take(10):
    train.append(_unnormalize(features['train_images'].numpy()))
    validation.append(_unnormalize(features['validation_images'].numpy()))
  held_out = embedded.held_out_indices(arrays.train_labels, 2000)
  rest = np.setdiff1d(np.arange(12000), held_out)
  validation_hashes = _hashes(np.concatenate(validation))
  train_hashes = _hashes(np.concatenate(train))
  assert len(validation_hashes) > 1500  # 2,000 drawn: mostly distinct.
  assert validation_hashes <= _hashes(arrays.train_images[held_out])
  assert train_hashes <= _hashes(arrays.train_images[rest])
  assert not (train_hashes | validation_hashes) & _hashes(arrays.test_images)


def _record_splits(monkeypatch):
  """The splits the embedded source is asked for from now on, in order."""
  requested = []
  original = embedded.EmbeddedSource.examples

  def spy(self, split, **kwargs):
    requested.append(split)
    return original(self, split, **kwargs)

  monkeypatch.setattr(embedded.EmbeddedSource, 'examples', spy)
  return requested


def test_search_never_reads_the_test_split(cache_dir, monkeypatch):
  requested = _record_splits(monkeypatch)
  data.SearchInputFn('embedded', cache_dir, 28, seed=0)({'batch_size': 4})
  assert sorted(requested) == ['train', 'validation']


def test_search_seed_makes_batches_reproducible(cache_dir):
  def first_labels(seed):
    input_fn = data.SearchInputFn('embedded', cache_dir, 28, seed=seed,
                                  shuffle_buffer=300)
    return next(iter(input_fn({'batch_size': 16})))[1]['train_labels'].numpy()
  np.testing.assert_array_equal(first_labels(5), first_labels(5))
  assert not np.array_equal(first_labels(5), first_labels(6))
  # The largest seed a config accepts: the per-stream seeds derived from it
  # stay within TensorFlow's int64.
  np.testing.assert_array_equal(first_labels(config.MAX_SEED),
                                first_labels(config.MAX_SEED))


def test_search_transpose_round_trip(cache_dir):
  make = lambda t: data.SearchInputFn('embedded', cache_dir, 30, seed=1,
                                      shuffle_buffer=200,
                                      transpose_input=t)({'batch_size': 4})
  plain, _ = next(iter(make(False)))
  transposed, _ = next(iter(make(True)))
  assert transposed['train_images'].shape == (30, 30, 1, 4)
  assert transposed['validation_images'].shape == (30, 30, 1, 16)
  np.testing.assert_array_equal(
      data.untranspose_images(transposed['train_images']).numpy(),
      plain['train_images'].numpy())


def test_search_graph_mode_keeps_images_out_of_the_graph(cache_dir):
  graph = tf.Graph()
  with graph.as_default():
    dataset = data.SearchInputFn('embedded', cache_dir, 224, seed=0)(
        {'batch_size': 2})
    features, _ = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    # The 11 MB of images are read from files, not stored as constants.
    assert graph.as_graph_def().ByteSize() < 500_000
    with tf.compat.v1.Session() as session:
      images = session.run(features['validation_images'])
  assert images.shape == (8, 224, 224, 1)


class _FakeTpuContext:
  """Stands in for TPUContext under InputPipelineConfig.PER_HOST_V2."""

  def __init__(self, index, count):
    self._deployment = ('/job:worker/task:0/device:CPU:0', index, count, 8)

  def current_input_fn_deployment(self):
    return self._deployment


def test_classifier_eval_is_one_ordered_pass_per_host(cache_dir, arrays):
  input_fn = data.ClassifierInputFn('embedded', cache_dir, 'test', 28,
                                    is_training=False)
  labels = np.concatenate([l.numpy() for _, l in input_fn({'batch_size': 300})])
  np.testing.assert_array_equal(labels, arrays.test_labels[:1800])
  assert input_fn.dropped_examples(300) == 200
  host1 = input_fn({'batch_size': 100, 'context': _FakeTpuContext(1, 2)})
  labels = np.concatenate([l.numpy() for _, l in host1])
  np.testing.assert_array_equal(labels, arrays.test_labels[1::2])


def test_classifier_training_batches(cache_dir):
  input_fn = data.ClassifierInputFn('embedded', cache_dir, 'train_full', 64,
                                    is_training=True, seed=2)
  images, labels = next(iter(input_fn({'batch_size': 8})))
  assert images.shape == (8, 64, 64, 1) and labels.shape == (8,)
  assert images.dtype == tf.float32 and labels.dtype == tf.int32


@pytest.mark.parametrize('size', [27, 513, 32.0])
def test_image_size_out_of_range(size):
  with pytest.raises(data.DataError, match=r'\[28, 512\]'):
    data.SearchInputFn('embedded', None, size)


def test_unknown_dataset_lists_valid_names():
  with pytest.raises(registry.UnknownNameError,
                     match="'mnist'.*cifar10, embedded, imagenet.*tfds:NAME"):
    data.SearchInputFn('mnist', None, 32)


def test_unknown_split_rejected():
  with pytest.raises(data.DataError, match='valid splits'):
    data.ClassifierInputFn('embedded', None, 'dev', 28, False)


def test_embedded_is_the_default_and_available():
  assert data.DEFAULT_DATASET == 'embedded'
  data.check_available('embedded')
  info = data.get_info('embedded')
  assert (info.num_classes, info.channels, info.default_image_size) == (
      10, 1, 28)
  assert (info.num_train, info.num_validation, info.num_test) == (
      10000, 2000, 2000)


def test_without_the_training_stream_only_validation_is_read(cache_dir,
                                                              monkeypatch):
  make = lambda training: data.SearchInputFn(
      'embedded', cache_dir, 28, seed=0, training_stream=training)(
          {'batch_size': 4})
  with_training = list(make(True).take(3))
  requested = _record_splits(monkeypatch)
  without = list(make(False).take(3))
  assert requested == ['validation']
  for (features, labels), (features_t, labels_t) in zip(without,
                                                        with_training):
    assert features['train_images'].shape == (0, 28, 28, 1)
    assert labels['train_labels'].shape == (0,)
    assert features['train_images'].dtype == tf.float32
    # The same validation batches as a search's.
    np.testing.assert_array_equal(features['validation_images'],
                                  features_t['validation_images'])
    np.testing.assert_array_equal(labels['validation_labels'],
                                  labels_t['validation_labels'])
