#!/usr/bin/env python3
"""Zeroes the GPU code in shared libraries that one GPU model never loads.

  python tools/gpu_offline/strip_fatbins.py [--keep_arch=90] [--all] [--dry_run] LIB...

Used by make_bundle.sh to fit TensorFlow's CUDA libraries into what can be
carried to an offline GPU machine: zeroed bytes compress to almost nothing,
and the libraries keep their size and layout, so nothing else changes.

CUDA libraries embed their kernels in fat binaries: a 16-byte header
(uint32 magic 0xBA55ED50, uint16 version 1, uint16 header size, uint64 size
of the entries) followed by entries, each with its own header (uint16 kind:
1 PTX, 2 machine code; uint32 header size at byte 4; uint64 payload size at
byte 8; uint32 architecture at byte 28, e.g. 90 for sm_90) and payload: the
layout as publicly described (NVIDIA does not document it officially).

A GPU of architecture K runs machine code built for K and JIT-compiles PTX
of an architecture <= K. So per fat binary this keeps the sm_K machine code,
or where there is none the newest PTX <= K, and zeroes every other payload
(the headers stay, so the driver still sees what each entry was). With
--all it zeroes every payload: for libraries that must load but whose
kernels never run. Prints one JSON object per library.
"""

import argparse
import collections
import json
import mmap
import os
import struct
import sys
from typing import Dict, List, Tuple

MAGIC = 0xBA55ED50
PTX, MACHINE_CODE = 1, 2
_BLOB = struct.Struct('<IHHQ')  # magic, version, header size, entries' size


def _entries(data, start: int, end: int) -> List[Tuple[int, int, int, int]]:
  """(kind, arch, payload offset, payload size) of a blob's entries.

  Returns [] when the bytes at `start` are not entries (a false magic).
  """
  entries = []
  offset = start
  while offset < end:
    kind, _, header_size, size = struct.unpack_from('<HHIQ', data, offset)
    arch, = struct.unpack_from('<I', data, offset + 28)
    if (kind not in (PTX, MACHINE_CODE) or not 32 <= header_size <= 512
        or offset + header_size + size > end):
      return []
    entries.append((kind, arch, offset + header_size, size))
    offset += header_size + size
  return entries


def _kept(entries, keep_arch: int, zero_all: bool) -> List[bool]:
  if zero_all:
    return [False] * len(entries)
  has_code = any(k == MACHINE_CODE and a == keep_arch for k, a, _, _ in entries)
  ptx = [a for k, a, _, _ in entries if k == PTX and a <= keep_arch]
  newest_ptx = max(ptx) if ptx and not has_code else None
  return [(k == MACHINE_CODE and a == keep_arch) or (k == PTX and a == newest_ptx)
          for k, a, _, _ in entries]


def strip(data, keep_arch: int = 90, zero_all: bool = False,
          dry_run: bool = False) -> Dict[str, int]:
  """Zeroes, in place, the payloads `keep_arch` never loads.

  Args:
    data: a writable buffer (bytearray or mmap) holding a library.
    keep_arch: the GPU architecture to keep code for (90: H100).
    zero_all: zero every payload.
    dry_run: count, change nothing.

  Returns:
    Counts: fat binaries, false magics skipped, bytes kept and zeroed.
  """
  stats = collections.Counter(blobs=0, skipped=0, kept_bytes=0,
                              zeroed_bytes=0)
  magic = struct.pack('<I', MAGIC)
  position = data.find(magic)
  while position != -1:
    _, version, header_size, size = _BLOB.unpack_from(data, position)
    start, end = position + header_size, position + header_size + size
    entries = (_entries(data, start, end)
               if version == 1 and header_size == 16 and end <= len(data)
               else [])
    if not entries:
      stats['skipped'] += 1
      position = data.find(magic, position + 4)
      continue
    stats['blobs'] += 1
    for (_, _, offset, n), keep in zip(entries,
                                       _kept(entries, keep_arch, zero_all)):
      stats['kept_bytes' if keep else 'zeroed_bytes'] += n
      if not keep and not dry_run:
        data[offset:offset + n] = bytes(n)
    position = data.find(magic, end)
  return dict(stats)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('libraries', nargs='+')
  parser.add_argument('--keep_arch', type=int, default=90)
  parser.add_argument('--all', action='store_true', dest='zero_all')
  parser.add_argument('--dry_run', action='store_true')
  args = parser.parse_args(argv)
  for path in args.libraries:
    try:
      with open(path, 'rb' if args.dry_run else 'r+b') as f:
        if os.fstat(f.fileno()).st_size == 0:  # mmap refuses empty files.
          stats = strip(bytearray(), args.keep_arch, args.zero_all, True)
        else:
          access = mmap.ACCESS_READ if args.dry_run else mmap.ACCESS_WRITE
          with mmap.mmap(f.fileno(), 0, access=access) as data:
            stats = strip(data, args.keep_arch, args.zero_all, args.dry_run)
    except OSError as e:
      print(f'strip_fatbins: cannot open {path!r}: {e.strerror}',
            file=sys.stderr)
      return 2
    print(json.dumps(dict(library=path, **stats)))
  return 0


if __name__ == '__main__':
  sys.exit(main())
