#!/usr/bin/env python3
"""Writes a folder of generated PNG images in 3 classes, for --dataset=folder:.

  python examples/make_image_folder.py /tmp/shapes

makes /tmp/shapes/{disk,hstripes,vstripes}/*.png (training images) and
/tmp/shapes/test/<class>/*.png, 32x32 RGB with random colours, positions
and noise; the same --seed writes the same bytes. Needs only numpy: the PNG
encoder below writes 8-bit RGB (PNG specification, sections 5, 11.2.2).
"""

import argparse
import os
import struct
import zlib

import numpy as np

CLASSES = ('disk', 'hstripes', 'vstripes')


def png_bytes(image: np.ndarray) -> bytes:
  """An 8-bit RGB PNG of uint8 [H, W, 3] `image`."""
  height, width, _ = image.shape

  def chunk(kind: bytes, payload: bytes) -> bytes:
    return (struct.pack('>I', len(payload)) + kind + payload +
            struct.pack('>I', zlib.crc32(kind + payload) & 0xFFFFFFFF))
  # Filter type 0 (none) before every row.
  raw = b''.join(b'\x00' + row.tobytes() for row in image)
  header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
  return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) +
          chunk(b'IDAT', zlib.compress(raw, 9)) + chunk(b'IEND', b''))


def draw(label: int, size: int, rng: np.random.Generator) -> np.ndarray:
  """One uint8 [size, size, 3] image of class CLASSES[label]."""
  y, x = np.mgrid[:size, :size]
  if label == 0:  # A disk somewhere in the image.
    cy, cx = rng.uniform(0.3, 0.7, 2) * size
    radius = rng.uniform(0.15, 0.3) * size
    shape = (y - cy) ** 2 + (x - cx) ** 2 < radius ** 2
  else:  # Stripes of a random period and phase.
    period = rng.integers(4, 9)
    along = y if label == 1 else x
    shape = (along + rng.integers(period)) % period < period // 2
  background, foreground = rng.uniform(0, 255, (2, 3))
  image = np.where(shape[..., None], foreground, background)
  image += rng.normal(0, 20, image.shape)
  return np.clip(image, 0, 255).astype(np.uint8)


def write_split(root: str, per_class: int, size: int,
                rng: np.random.Generator) -> None:
  for label, name in enumerate(CLASSES):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(per_class):
      with open(os.path.join(root, name, f'{i:04d}.png'), 'wb') as f:
        f.write(png_bytes(draw(label, size, rng)))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('output_dir')
  parser.add_argument('--train_per_class', type=int, default=100)
  parser.add_argument('--test_per_class', type=int, default=30)
  parser.add_argument('--size', type=int, default=32)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args()
  rng = np.random.default_rng(args.seed)
  write_split(args.output_dir, args.train_per_class, args.size, rng)
  if args.test_per_class:
    write_split(os.path.join(args.output_dir, 'test'), args.test_per_class,
                args.size, rng)
  total = len(CLASSES) * (args.train_per_class + args.test_per_class)
  print(f'Wrote {total} PNG images in {len(CLASSES)} classes to '
        f'{args.output_dir}')


if __name__ == '__main__':
  main()
