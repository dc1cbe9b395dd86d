"""Image files a user brings: PNG/JPEG headers, and finding an unreadable one.

Headers are parsed in Python (PNG: the IHDR chunk; JPEG: the start-of-frame
marker), so a dataset's classes, channels and image size are known, and
every file is checked to be a PNG or JPEG, before a graph is built or
anything is written.
"""

import struct
from typing import Callable, Iterable, NamedTuple, Optional, Tuple

import tensorflow as tf

from tunas_search.data import base

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg')
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
JPEG_SIGNATURE = b'\xff\xd8'
# PNG colour types (PNG specification, section 11.2.2) -> decoded channels
# as tunas_search uses them: grey (+alpha) -> 1, RGB, palette, RGBA -> 3.
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 1, 6: 3}
# JPEG start-of-frame markers SOF0-SOF15 (ITU T.81, table B.1), except DHT
# (C4), JPG (C8) and DAC (CC), which share the range.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Enough of a JPEG to reach its start-of-frame past large EXIF blocks
# (an APP segment holds at most 64 KiB).
HEADER_BYTES = 1 << 17


class ImageHeader(NamedTuple):
  height: int
  width: int
  channels: int  # 1 (grey) or 3 (colour), as tunas_search decodes it.


def _png_header(data: bytes) -> ImageHeader:
  if len(data) < 26 or data[12:16] != b'IHDR':
    raise ValueError('truncated PNG header')
  width, height = struct.unpack('>II', data[16:24])
  color_type = data[25]
  if color_type not in _PNG_CHANNELS or not width or not height:
    raise ValueError('bad PNG header')
  return ImageHeader(height, width, _PNG_CHANNELS[color_type])


def _jpeg_header(data: bytes) -> ImageHeader:
  pos = 2
  while pos + 4 <= len(data):
    if data[pos] != 0xFF:
      raise ValueError('bad JPEG marker')
    marker = data[pos + 1]
    if marker == 0xFF:  # Fill byte.
      pos += 1
      continue
    if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # No length.
      pos += 2
      continue
    (length,) = struct.unpack('>H', data[pos + 2:pos + 4])
    if marker in _JPEG_SOF:
      if pos + 10 > len(data):
        break
      height, width = struct.unpack('>HH', data[pos + 5:pos + 9])
      components = data[pos + 9]
      if not width or not height or components not in (1, 3, 4):
        raise ValueError('bad JPEG frame header')
      return ImageHeader(height, width, 1 if components == 1 else 3)
    pos += 2 + length
  raise ValueError('no JPEG frame header')


def parse_header(data: bytes) -> ImageHeader:
  """The size and channels of a PNG or JPEG from its first bytes.

  Args:
    data: the file's first HEADER_BYTES bytes (or all of it).

  Raises:
    ValueError: if `data` does not start a PNG or JPEG image.
  """
  if data.startswith(PNG_SIGNATURE):
    return _png_header(data)
  if data.startswith(JPEG_SIGNATURE):
    return _jpeg_header(data)
  raise ValueError('not a PNG or JPEG image' if data else 'empty file')


def read_header(path: str) -> ImageHeader:
  """`parse_header` of a local or gs:// file.

  Raises:
    DataError: naming the file, if it cannot be read or is no PNG or JPEG.
  """
  try:
    with tf.io.gfile.GFile(path, 'rb') as f:
      data = f.read(HEADER_BYTES)
    return parse_header(data)
  except (ValueError, tf.errors.OpError, OSError) as e:
    reason = getattr(e, 'message', None) or str(e)
    raise base.DataError(f'unreadable image {path}: {reason}') from None


def statistics(channels: int) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
  """(mean, std) to normalise a user's images with, per channel.

  ImageNet's channel statistics (base.IMAGENET_MEAN/STD) for colour images,
  their averages for grey ones: computing a dataset's own would mean reading
  every image before the first step.
  """
  if channels == 3:
    return base.IMAGENET_MEAN, base.IMAGENET_STD
  return ((round(sum(base.IMAGENET_MEAN) / 3, 4),),
          (round(sum(base.IMAGENET_STD) / 3, 4),))


def default_image_size(header: ImageHeader) -> int:
  """A square input side for images like `header`: the shorter side, at
  most `base.MAX_DEFAULT_IMAGE_SIZE`."""
  side = min(header.height, header.width)
  return min(max(side, base.MIN_IMAGE_SIZE), base.MAX_DEFAULT_IMAGE_SIZE)


def first_undecodable(blobs: Iterable[Tuple[str, Callable[[], bytes]]]
                      ) -> Optional[Tuple[str, str]]:
  """The first image that TensorFlow cannot decode, with the reason.

  Runs in a graph and session of its own, so it works in eager code and
  inside an Estimator's graph alike. Called only after streaming failed:
  it reads every image until the bad one.

  Args:
    blobs: (name, function returning the encoded bytes), in order.

  Returns:
    (name, reason) of the first undecodable image, or None.
  """
  with tf.Graph().as_default():
    encoded = tf.compat.v1.placeholder(tf.string, [])
    decoded = tf.io.decode_image(encoded, expand_animations=False)
    with tf.compat.v1.Session() as session:
      for name, read in blobs:
        try:
          session.run(decoded, {encoded: read()})
        except (tf.errors.OpError, OSError) as e:
          return name, _reason(getattr(e, 'message', None) or str(e))
  return None


def _reason(message: str) -> str:
  """The op's own words from a graph error ('Invalid PNG data, size 100').

  A session's error message wraps them in lines about where the node was
  defined.
  """
  lines = [line for line in message.splitlines()
           if line.strip() and not line.startswith((' ', '\t')) and
           not line.startswith(('Graph execution error', 'Detected at node',
                                'Node:'))]
  return lines[-1] if lines else 'cannot be decoded'
