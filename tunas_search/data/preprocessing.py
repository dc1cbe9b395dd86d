"""Image preprocessing: Inception and light augmentation, centre crop, normalisation."""

from typing import Sequence

import tensorflow as tf

from tunas_search.data import base

# docs/method.md section 6, "Preprocessing" (TuNAS): Inception-style random
# crops (Szegedy et al., "Going deeper with convolutions", 2015) with aspect
# ratio 3/4-4/3 and an area range of 8%-100%, of which the released code's
# crops must cover at least 10% of the image (its `min_object_covered`);
# where 10 attempts find no such crop, it takes the evaluation centre crop
# instead. Then a horizontal flip and a bicubic resize.
CROP_AREA_RANGE = (0.08, 1.0)
CROP_MIN_COVERED = 0.1
CROP_ASPECT_RANGE = (3. / 4., 4. / 3.)
CROP_ATTEMPTS = 10
# Evaluation centre crop: 224 of 256 pixels (docs/method.md section 6,
# "Preprocessing").
CENTRE_CROP_FRACTION = 224. / 256.
# Light augmentation shifts the image by up to 1/8 of its size (4 pixels at
# 32x32, the usual CIFAR pad-and-crop).
LIGHT_PAD_FRACTION = 1. / 8.


def _shape(image: tf.Tensor) -> tf.Tensor:
  """int32 [3] (height, width, channels) of a decoded image or a JPEG."""
  if image.dtype == tf.string:
    return tf.image.extract_jpeg_shape(image)
  return tf.shape(image)


def _crop(image: tf.Tensor, offset: tf.Tensor, size: tf.Tensor,
          channels: int) -> tf.Tensor:
  """Crops [offset, offset + size) of (height, width); decodes a JPEG.

  Returns:
    uint8 [h, w, channels].
  """
  if image.dtype == tf.string:
    window = tf.stack([offset[0], offset[1], size[0], size[1]])
    return tf.image.decode_and_crop_jpeg(image, window, channels=channels)
  return tf.slice(image, tf.stack([offset[0], offset[1], 0]),
                  tf.stack([size[0], size[1], -1]))


def _resize(image: tf.Tensor, image_size: int) -> tf.Tensor:
  """Bicubic resize to [image_size, image_size]; float32 in [0, 255]."""
  image = tf.cast(image, tf.float32)
  if image.shape[0] == image_size and image.shape[1] == image_size:
    return image  # Statically the right size: skip a no-op resize.
  image = tf.image.resize(image, [image_size, image_size], method='bicubic')
  # Bicubic interpolation overshoots; keep the original value range.
  return tf.clip_by_value(image, 0., 255.)


def normalize(image: tf.Tensor, mean: Sequence[float],
              std: Sequence[float]) -> tf.Tensor:
  """Maps pixel values in [0, 255] to (x / 255 - mean) / std, per channel."""
  mean = tf.constant([255. * m for m in mean], tf.float32)
  std = tf.constant([255. * s for s in std], tf.float32)
  return (tf.cast(image, tf.float32) - mean) / std


def inception_crop(image: tf.Tensor, seed: tf.Tensor, image_size: int,
                   channels: int) -> tf.Tensor:
  """Random crop (area 10%-100%, aspect 3/4-4/3), flip, bicubic resize.

  Without such a crop in CROP_ATTEMPTS tries (a very elongated image), the
  centre crop of evaluation, flipped at random, as the released TuNAS.

  Args:
    image: uint8 [H, W, C] or a scalar tf.string JPEG.
    seed: int [2] stateless seed.
    image_size: output side S.
    channels: C.

  Returns:
    float32 [S, S, C] with values in [0, 255].
  """
  seeds = tf.random.experimental.stateless_split(seed, 2)
  whole_image = tf.constant([0., 0., 1., 1.], shape=[1, 1, 4])
  shape = _shape(image)
  offset, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      shape, whole_image, seed=seeds[0],
      min_object_covered=CROP_MIN_COVERED,
      aspect_ratio_range=CROP_ASPECT_RANGE, area_range=CROP_AREA_RANGE,
      max_attempts=CROP_ATTEMPTS, use_image_if_no_bounding_boxes=True)
  # Without a crop the whole image comes back (as would a crop of all of it,
  # which the released code treats the same way).
  found = tf.reduce_any(tf.not_equal(size[:2], shape[:2]))
  image = tf.cond(
      found,
      lambda: _resize(_crop(image, offset[:2], size[:2], channels),
                      image_size),
      lambda: centre_crop(image, image_size, channels))
  image = tf.image.stateless_random_flip_left_right(image, seeds[1])
  return tf.ensure_shape(image, [image_size, image_size, channels])


def light_augment(image: tf.Tensor, seed: tf.Tensor, image_size: int,
                  channels: int) -> tf.Tensor:
  """Resize, random shift (pad and crop back) and horizontal flip.

  For small low-resolution images (28x28 Fashion-MNIST, 32x32 CIFAR-10) an
  Inception crop of 10% of the area would keep about 9x9 pixels, too little
  to recognise the object, so only small shifts and flips are used.

  Args:
    image: uint8 [H, W, C] (decoded).
    seed: int [2] stateless seed.
    image_size: output side S.
    channels: C.

  Returns:
    float32 [S, S, C] with values in [0, 255].
  """
  seeds = tf.random.experimental.stateless_split(seed, 2)
  image = _resize(image, image_size)
  pad = int(round(LIGHT_PAD_FRACTION * image_size))
  # Zero padding: the embedded images and most small datasets have a dark or
  # plain background, and padding with zeros is what the CIFAR recipe does.
  image = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
  image = tf.image.stateless_random_crop(
      image, [image_size, image_size, channels], seed=seeds[0])
  return tf.image.stateless_random_flip_left_right(image, seeds[1])


def centre_crop(image: tf.Tensor, image_size: int, channels: int,
                fraction: float = CENTRE_CROP_FRACTION) -> tf.Tensor:
  """Central crop of `fraction` of the shorter side, then bicubic resize.

  Args:
    image: uint8 [H, W, C] or a scalar tf.string JPEG.
    image_size: output side S.
    channels: C.
    fraction: side of the crop over the shorter image side.

  Returns:
    float32 [S, S, C] with values in [0, 255].
  """
  shape = _shape(image)
  side = tf.cast(fraction * tf.cast(tf.minimum(shape[0], shape[1]),
                                    tf.float32), tf.int32)
  offset = (shape[:2] - side) // 2
  image = _crop(image, offset, tf.stack([side, side]), channels)
  return tf.ensure_shape(_resize(image, image_size),
                         [image_size, image_size, channels])


def preprocess(image: tf.Tensor, seed: tf.Tensor, *, info: base.DatasetInfo,
               image_size: int, augment: bool) -> tf.Tensor:
  """Preprocesses one image for `info`'s dataset.

  Args:
    image: uint8 [H, W, C] or a scalar tf.string JPEG.
    seed: int [2] stateless seed (unused when augment is False).
    info: the dataset's DatasetInfo (augmentation family, mean, std).
    image_size: output side S.
    augment: training augmentation; otherwise the evaluation transform
      (centre crop for INCEPTION datasets, a plain resize for LIGHT ones,
      whose objects fill the frame).

  Returns:
    float32 [S, S, C], normalised.
  """
  channels = info.channels
  if image.dtype == tf.string and info.augmentation == base.LIGHT:
    image = tf.io.decode_jpeg(image, channels=channels)
  if info.augmentation == base.LIGHT:
    image = (light_augment(image, seed, image_size, channels) if augment
             else _resize(image, image_size))
  else:
    image = (inception_crop(image, seed, image_size, channels) if augment
             else centre_crop(image, image_size, channels))
  image = tf.ensure_shape(image, [image_size, image_size, channels])
  return normalize(image, info.mean, info.std)


def transpose_images(images: tf.Tensor) -> tf.Tensor:
  """[N, H, W, C] -> [H, W, C, N], the faster TPU infeed layout."""
  return tf.transpose(images, [1, 2, 3, 0])


def untranspose_images(images: tf.Tensor) -> tf.Tensor:
  """[H, W, C, N] -> [N, H, W, C]: the inverse of transpose_images.

  The model_fn calls this on features made with transpose_input=True.
  """
  return tf.transpose(images, [3, 0, 1, 2])

