"""Tests for preprocessing: crops, light augmentation, normalisation, transpose."""

import numpy as np
import pytest
import tensorflow as tf

from tunas_search.data import base
from tunas_search.data import preprocessing


def _ramp(height, width, channels=3):
  """uint8 image whose pixel (y, x) holds y in channel 0 and x in channel 1."""
  y, x = np.meshgrid(np.arange(height), np.arange(width), indexing='ij')
  image = np.stack([y, x] + [np.zeros_like(x)] * (channels - 2), -1)
  return tf.constant(image.astype(np.uint8))


def test_normalize_numbers():
  image = tf.constant([[[0., 127.5, 255.]]])
  out = preprocessing.normalize(image, (0.5, 0.5, 0.5), (0.25, 0.5, 1.0))
  # float32 (x / 255 - mean) / std: 127.5 / 255 is not exact in float32, so
  # atol (an expected 0) of a few ulps.
  np.testing.assert_allclose(out.numpy(), [[[-2., 0., 0.5]]], atol=1e-6)


def test_centre_crop_takes_the_central_seven_eighths():
  # 256x256: the crop is 224 pixels starting at 16; at 224 no resize happens.
  out = preprocessing.centre_crop(_ramp(256, 256), 224, 3).numpy()
  assert out.shape == (224, 224, 3)
  assert (out[0, 0, 0], out[-1, 0, 0], out[0, 0, 1], out[0, -1, 1]) == (
      16, 239, 16, 239)


def test_centre_crop_of_jpeg_matches_decoded_image():
  image = _ramp(64, 96)
  jpeg = tf.io.encode_jpeg(image, quality=100)
  decoded = preprocessing.centre_crop(tf.io.decode_jpeg(jpeg), 32, 3)
  direct = preprocessing.centre_crop(jpeg, 32, 3)
  # Chroma upsampling at the crop edge may differ by a level or two.
  np.testing.assert_allclose(direct.numpy(), decoded.numpy(), atol=2.)


@pytest.mark.parametrize('seed', range(6))
def test_inception_crop_area_and_aspect(seed):
  # On a (y, x) ramp the output's value range reveals the crop window: at
  # output size 64 the outermost samples sit 1/128 of the crop inside it.
  out = preprocessing.inception_crop(_ramp(256, 256), tf.constant([seed, 7]),
                                     64, 3).numpy()
  assert out.shape == (64, 64, 3)
  height = (out[..., 0].max() - out[..., 0].min()) * 64 / 63 + 1
  width = (out[..., 1].max() - out[..., 1].min()) * 64 / 63 + 1
  # The uint8 ramp values give the window's sides to about a pixel each
  # (bilinear sampling), hence 2 pixels per side on the area and 0.05 on the
  # aspect ratio beyond the released TuNAS's [0.1, 1] area and [3/4, 4/3]
  # aspect.
  assert 0.1 * 256 ** 2 - 2 * 256 * 2 <= height * width <= 256 ** 2 + 1
  assert 0.75 - 0.05 <= width / height <= 4 / 3 + 0.05


def test_inception_crop_covers_at_least_a_tenth():
  # Over many seeds the smallest crop is near 10%, never at 8%-10%.
  areas = []
  for seed in range(60):
    out = preprocessing.inception_crop(_ramp(256, 256),
                                       tf.constant([seed, 3]), 64, 3).numpy()
    height = (out[..., 0].max() - out[..., 0].min()) * 64 / 63 + 1
    width = (out[..., 1].max() - out[..., 1].min()) * 64 / 63 + 1
    areas.append(height * width / 256 ** 2)
  assert 0.1 - 0.02 <= min(areas) < 0.3


def test_inception_crop_without_a_crop_takes_the_centre_crop():
  # 12 x 256: a crop of 10% of the area with aspect <= 4/3 needs a height of
  # at least sqrt(0.1 * 12 * 256 * 3 / 4) ~ 15 pixels, more than 12. The
  # released TuNAS takes the evaluation centre crop then, and flips it at
  # random: exactly mirrored for some seeds, untouched for others.
  image = _ramp(12, 256)
  centre = preprocessing.centre_crop(image, 32, 3).numpy()
  flipped = []
  for seed in range(8):
    out = preprocessing.inception_crop(image, tf.constant([seed, 1]), 32,
                                       3).numpy()
    if np.array_equal(out, centre[:, ::-1]):
      flipped.append(seed)
    else:
      np.testing.assert_array_equal(out, centre, err_msg=f'seed {seed}')
  assert 0 < len(flipped) < 8, flipped


def test_inception_crop_flips_some_crops():
  # On the (y, x) ramp, channel 1 grows along each row unless the crop was
  # flipped; both must happen over a few seeds.
  rising = set()
  for seed in range(8):
    out = preprocessing.inception_crop(_ramp(256, 256),
                                       tf.constant([seed, 5]), 32, 3).numpy()
    steps = np.diff(out[..., 1], axis=1)
    assert np.all(steps >= 0) or np.all(steps <= 0), seed
    rising.add(bool(steps.sum() > 0))
  assert rising == {True, False}


def test_light_augment_shifts_by_at_most_one_eighth():
  image = tf.ones([32, 32, 1], tf.uint8) * 200
  for seed in range(5):
    out = preprocessing.light_augment(image, tf.constant([seed, 0]), 32, 1)
    assert out.shape == (32, 32, 1)
    # Padding is 4 pixels, so at least 28x28 of the 32x32 stays the image.
    assert int(tf.reduce_sum(tf.cast(out > 0, tf.int32))) >= 28 * 28


def test_light_augment_is_a_shift_mirrored_for_some_seeds():
  # Every output is a 32x32 window of the zero-padded image, mirrored left
  # to right for some seeds and not for others; random pixels make the
  # window and its orientation unique.
  image = np.random.default_rng(0).integers(1, 256, (32, 32, 3), np.uint8)
  padded = np.pad(image, [(4, 4), (4, 4), (0, 0)]).astype(np.float32)
  windows = {(dy, dx): padded[dy:dy + 32, dx:dx + 32]
             for dy in range(9) for dx in range(9)}
  mirrored = []
  for seed in range(8):
    out = preprocessing.light_augment(tf.constant(image),
                                      tf.constant([seed, 2]), 32, 3).numpy()
    plain = [k for k, w in windows.items() if np.array_equal(out, w)]
    flipped = [k for k, w in windows.items()
               if np.array_equal(out[:, ::-1], w)]
    assert len(plain) + len(flipped) == 1, (seed, plain, flipped)
    if flipped:
      mirrored.append(seed)
  assert 0 < len(mirrored) < 8, mirrored


def test_preprocess_eval_of_embedded_is_plain_normalisation():
  info = base.DatasetInfo('x', 10, 1, 28, 1, 1, 1, augmentation=base.LIGHT,
                          mean=(0.5,), std=(0.5,))
  image = tf.fill([28, 28, 1], tf.constant(255, tf.uint8))
  out = preprocessing.preprocess(image, tf.zeros([2], tf.int64), info=info,
                                 image_size=28, augment=False)
  # (255 / 255 - 0.5) / 0.5 is exact in float32: default rtol=1e-7.
  np.testing.assert_allclose(out.numpy(), np.ones([28, 28, 1]))


def test_transpose_round_trip():
  images = tf.random.stateless_uniform([4, 5, 6, 3], seed=[1, 2])
  transposed = preprocessing.transpose_images(images)
  assert transposed.shape == (5, 6, 3, 4)
  np.testing.assert_array_equal(
      preprocessing.untranspose_images(transposed).numpy(), images.numpy())
