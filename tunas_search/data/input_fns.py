"""TPUEstimator-style input functions for the search and for train/eval."""

from typing import Any, Mapping, Optional, Tuple

import tensorflow as tf

from tunas_search.data import base
from tunas_search.data import catalog
from tunas_search.data import preprocessing

# Largest shuffle buffer by default (examples before decoding; ImageNet JPEGs
# average ~110 kB, so ~1.8 GB of host memory).
DEFAULT_SHUFFLE_BUFFER = 16384
# Seed offsets so the train and validation streams differ for one seed.
_TRAIN_STREAM, _VALIDATION_STREAM = 0, 1


def host_shard(params: Mapping[str, Any]) -> Optional[Tuple[int, int]]:
  """(host index, number of hosts) for per-host input, else None.

  TPUEstimator with InputPipelineConfig.PER_HOST_V2 calls the input function
  once per host and passes a TPUContext as params['context']; the workers of
  a multi-worker search pass their (index, count) as params['shard'].
  """
  shard = params.get('shard')
  if shard is not None:
    return tuple(shard) if shard[1] > 1 else None
  context = params.get('context')
  if context is None:
    return None
  _, index, count = context.current_input_fn_deployment()[:3]
  return (index, count) if count > 1 else None


def _seed(seed: Optional[int], stream: int,
          shard: Optional[Tuple[int, int]]) -> Optional[int]:
  """A distinct seed for each stream and host; None stays None.

  Wrapped into int64, which TensorFlow's seeds are, for any seed the config
  accepts (`config.MAX_SEED`).
  """
  if seed is None:
    return None
  return (seed * 1000003 + 1009 * (shard[0] if shard else 0) + stream) % 2**63


class _InputFnBase:
  """Holds what both input functions share: the source and preprocessing."""

  def __init__(self, dataset_name: str, data_dir: Optional[str],
               image_size: int, num_validation: Optional[int],
               seed: Optional[int], shuffle_buffer: Optional[int],
               transpose_input: bool):
    self.image_size = base.validate_image_size(image_size)
    self.source = catalog.get_source(dataset_name, data_dir, num_validation)
    self.info = self.source.info
    self.seed = seed
    self.shuffle_buffer = shuffle_buffer
    self.transpose_input = transpose_input

  def _training_stream(self, split: str, batch_size: int, augment: bool,
                       shard: Optional[Tuple[int, int]],
                       stream: int) -> tf.data.Dataset:
    """Infinite, shuffled, preprocessed, batched (image, label) dataset."""
    seed = _seed(self.seed, stream, shard)
    ds = self.source.examples(split, shuffle_files=True, seed=seed,
                              shard=shard)
    buffer = self.shuffle_buffer or DEFAULT_SHUFFLE_BUFFER
    size = self.info.num_examples(split)
    if size is not None and not self.shuffle_buffer:
      buffer = min(buffer, max(1, size // (shard[1] if shard else 1)))
    ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat()
    # One stateless seed [2] per example keeps augmentation reproducible
    # under parallel map when a seed is given.
    seeds = tf.data.Dataset.random(seed=seed).batch(2)
    ds = tf.data.Dataset.zip((ds, seeds)).map(
        lambda example, s: self._preprocess(example, s, augment),
        num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True)

  def _preprocess(self, example, seed: tf.Tensor, augment: bool):
    image, label = example
    image = preprocessing.preprocess(image, seed, info=self.info,
                                     image_size=self.image_size,
                                     augment=augment)
    return image, label

  def _maybe_transpose(self, images: tf.Tensor) -> tf.Tensor:
    if self.transpose_input:
      return preprocessing.transpose_images(images)
    return images


class SearchInputFn(_InputFnBase):
  """Input for a TuNAS search: a training and a held-out validation stream.

  Only the 'train' and 'validation' splits (both carved from the official
  training set) are read; the test split never is.
  """

  def __init__(self, dataset_name: str, data_dir: Optional[str],
               image_size: int, validation_batch_multiplier: int = 4,
               transpose_input: bool = False, seed: Optional[int] = None,
               num_validation: Optional[int] = None,
               shuffle_buffer: Optional[int] = None, augment: bool = True,
               augment_validation: bool = False,
               training_stream: bool = True):
    """Creates the input function.

    Args:
      dataset_name: a registered dataset or 'tfds:NAME'.
      data_dir: the TFDS data directory ('embedded': optional cache dir).
      image_size: square input side S, in
        [MIN_IMAGE_SIZE, MAX_IMAGE_SIZE] (config.py).
      validation_batch_multiplier: M; the validation batch is M times the
        training batch (4 in TuNAS, docs/method.md section 6).
      transpose_input: emit images as [H, W, C, N] (TPU only); the model_fn
        undoes it with preprocessing.untranspose_images.
      seed: makes shuffling and augmentation reproducible; None: random.
      num_validation: held-out examples; None for the dataset's default.
      shuffle_buffer: examples per shuffle buffer; None: the split size up
        to DEFAULT_SHUFFLE_BUFFER.
      augment: augment the training stream.
      augment_validation: augment the validation stream too. False (the
        default) preprocesses it like evaluation data, so the controller's
        reward is accuracy on un-distorted images.
      training_stream: read the training split. False (a retarget, which
        has no training pass): the training images and labels are empty
        batches of 0 examples, and the validation stream is unchanged.

    Raises:
      DataError, registry.UnknownNameError: for bad arguments.
    """
    super().__init__(dataset_name, data_dir, image_size, num_validation,
                     seed, shuffle_buffer, transpose_input)
    if validation_batch_multiplier < 1:
      raise base.DataError('validation_batch_multiplier must be >= 1, got '
                           f'{validation_batch_multiplier}')
    self.validation_batch_multiplier = validation_batch_multiplier
    self.augment = augment
    self.augment_validation = augment_validation
    self.training_stream = training_stream

  def __call__(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    """Builds the dataset.

    Args:
      params: reads params['batch_size'] (B, per host on TPU) and
        params.get('context') (TPUContext, for per-host sharding).

    Returns:
      Infinite dataset of (features, labels): features = {'train_images':
      float32 [B, S, S, C], 'validation_images': float32 [M*B, S, S, C]}
      (both [S, S, C, .] if transpose_input), labels = {'train_labels': int32
      [B], 'validation_labels': int32 [M*B]}; B is 0 for the training batch
      without `training_stream`.
    """
    batch_size = params['batch_size']
    shard = host_shard(params)
    train = (self._training_stream('train', batch_size, self.augment, shard,
                                   _TRAIN_STREAM)
             if self.training_stream else None)
    validation = self._training_stream(
        'validation', self.validation_batch_multiplier * batch_size,
        self.augment_validation, shard, _VALIDATION_STREAM)
    if train is None:
      ds = validation.map(_without_training)
    else:
      ds = tf.data.Dataset.zip((train, validation))
    return ds.map(self._to_dicts).prefetch(tf.data.AUTOTUNE)

  def _to_dicts(self, train_batch, validation_batch):
    features = {
        'train_images': self._maybe_transpose(train_batch[0]),
        'validation_images': self._maybe_transpose(validation_batch[0]),
    }
    labels = {'train_labels': train_batch[1],
              'validation_labels': validation_batch[1]}
    return features, labels


def _without_training(images, labels):
  """(empty training batch, the validation batch) of one validation batch."""
  empty = (tf.zeros_like(images[:0]), tf.zeros_like(labels[:0]))
  return empty, (images, labels)


class ClassifierInputFn(_InputFnBase):
  """Input for stand-alone training and evaluation of one architecture.

  Training (is_training=True): infinite, shuffled, augmented. Evaluation:
  one pass in stored order, evaluation preprocessing, batches with
  drop_remainder (static shapes for TPU): the last num_examples % B examples
  (per host) are not evaluated; see dropped_examples().
  """

  def __init__(self, dataset_name: str, data_dir: Optional[str], split: str,
               image_size: int, is_training: bool,
               num_validation: Optional[int] = None,
               seed: Optional[int] = None,
               shuffle_buffer: Optional[int] = None,
               transpose_input: bool = False, drop_remainder: bool = True):
    """Creates the input function.

    Args:
      dataset_name: a registered dataset or 'tfds:NAME'.
      data_dir: the TFDS data directory ('embedded': optional cache dir).
      split: 'train', 'validation', 'test' or 'train_full' (base.SPLITS).
      image_size: square input side S, in
        [MIN_IMAGE_SIZE, MAX_IMAGE_SIZE] (config.py).
      is_training: training (augmented, infinite) or evaluation input.
      num_validation: held-out examples; None for the dataset's default.
      seed: makes shuffling and augmentation reproducible; None: random.
      shuffle_buffer: examples per shuffle buffer (training only).
      transpose_input: emit images as [S, S, C, B] (TPU only).
      drop_remainder: evaluation only: drop the last partial batch (needed
        on TPU); training always drops it.
    """
    super().__init__(dataset_name, data_dir, image_size, num_validation,
                     seed, shuffle_buffer, transpose_input)
    base.check_split(split)
    self.split = split
    self.is_training = is_training
    self.drop_remainder = drop_remainder

  def dropped_examples(self, batch_size: int) -> Optional[int]:
    """Examples an evaluation pass skips on one host, None if unknown."""
    size = self.info.num_examples(self.split)
    if size is None or not self.drop_remainder:
      return None if size is None else 0
    return size % batch_size

  def __call__(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    """Builds the dataset.

    Args:
      params: reads params['batch_size'] (B) and params.get('context').

    Returns:
      Dataset of (images float32 [B, S, S, C], labels int32 [B]).
    """
    batch_size = params['batch_size']
    shard = host_shard(params)
    if self.is_training:
      ds = self._training_stream(self.split, batch_size, True, shard,
                                 _TRAIN_STREAM)
    else:
      ds = self.source.examples(self.split, shard=shard)
      no_seed = tf.zeros([2], tf.int64)  # Evaluation is not random.
      ds = ds.map(lambda *example: self._preprocess(example, no_seed, False),
                  num_parallel_calls=tf.data.AUTOTUNE)
      ds = ds.batch(batch_size, drop_remainder=self.drop_remainder)
    ds = ds.map(lambda images, labels: (self._maybe_transpose(images), labels))
    return ds.prefetch(tf.data.AUTOTUNE)

  def sample(self, count: int, seed: int) -> tf.data.Dataset:
    """`count` examples of the split drawn with `seed`, unbatched.

    Evaluation preprocessing (no augmentation): what a deployed model sees,
    e.g. the representative images of an int8 conversion. The same seed
    draws the same examples; a split smaller than `count` gives all of its
    examples. The draw is uniform over the split when it fits the shuffle
    buffer (DEFAULT_SHUFFLE_BUFFER examples), else over shuffled files'
    first examples.

    Returns:
      Dataset of (image float32 [S, S, C], label int32).
    """
    ds = self.source.examples(self.split, shuffle_files=True, seed=seed)
    size = self.info.num_examples(self.split)
    buffer = min(DEFAULT_SHUFFLE_BUFFER, size or DEFAULT_SHUFFLE_BUFFER)
    ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=False)
    no_seed = tf.zeros([2], tf.int64)
    return ds.take(count).map(
        lambda *example: self._preprocess(example, no_seed, False))
