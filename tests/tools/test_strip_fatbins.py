"""Tests of tools/gpu_offline/strip_fatbins.py on fat binaries made here.

A fat binary is built byte by byte from the layout the tool reads, between
unrelated bytes (one of them a false magic), so each test knows which
payloads an sm_90 GPU needs and checks that exactly the others are zeroed.
"""

import json
import struct

import pytest

from tests import files


@pytest.fixture(scope='module')
def strip_fatbins():
  return files.load_script('tools', 'gpu_offline', 'strip_fatbins.py')


def _entry(kind, arch, payload: bytes) -> bytes:
  header = bytearray(64)
  struct.pack_into('<HHIQ', header, 0, kind, 1, len(header), len(payload))
  struct.pack_into('<I', header, 28, arch)
  return bytes(header) + payload


def _blob(entries) -> bytes:
  body = b''.join(_entry(*e) for e in entries)
  return struct.pack('<IHHQ', 0xBA55ED50, 1, 16, len(body)) + body


def _library(*blobs) -> bytearray:
  # A false magic first: the four bytes alone, followed by no valid entry.
  # (Payload letters avoid the magic's own bytes, 'P' and 'U'.)
  return bytearray(b'ELF-ish' + struct.pack('<I', 0xBA55ED50) + b'\xff' * 40
                   + b'--'.join(blobs) + b'tail')


def test_keeps_sm90_code_and_zeroes_other_architectures(strip_fatbins):
  data = _library(_blob([(2, 80, b'A' * 10), (2, 90, b'B' * 12),
                         (1, 90, b'C' * 8)]))
  stats = strip_fatbins.strip(data, keep_arch=90)
  assert bytes(data).count(b'B' * 12) == 1  # sm_90 code kept
  assert b'A' not in bytes(data) and b'C' not in bytes(data)
  assert stats == dict(blobs=1, skipped=1, kept_bytes=12, zeroed_bytes=18)
  assert len(data) == len(_library(_blob([(2, 80, b'A' * 10),
                                          (2, 90, b'B' * 12),
                                          (1, 90, b'C' * 8)])))


def test_without_sm90_code_keeps_the_newest_usable_ptx(strip_fatbins):
  data = _library(_blob([(2, 80, b'A' * 5), (1, 70, b'G' * 6),
                         (1, 80, b'Q' * 7), (1, 100, b'R' * 3)]))
  stats = strip_fatbins.strip(data, keep_arch=90)
  text = bytes(data)
  assert b'Q' * 7 in text  # the newest PTX an sm_90 GPU can compile
  assert b'A' not in text and b'G' not in text and b'R' not in text
  assert stats['kept_bytes'] == 7 and stats['zeroed_bytes'] == 14


def test_each_fat_binary_is_judged_alone_and_all_zeroes_everything(
    strip_fatbins):
  blobs = (_blob([(2, 90, b'B' * 4)]), _blob([(1, 75, b'G' * 4)]))
  data = _library(*blobs)
  strip_fatbins.strip(data, keep_arch=90)
  assert b'B' * 4 in bytes(data) and b'G' * 4 in bytes(data)
  data = _library(*blobs)
  stats = strip_fatbins.strip(data, zero_all=True)
  assert b'B' not in bytes(data) and b'G' not in bytes(data)
  assert stats['blobs'] == 2 and stats['kept_bytes'] == 0


def test_dry_run_changes_nothing_and_main_prints_json(strip_fatbins, tmp_path,
                                                      capsys):
  original = bytes(_library(_blob([(2, 80, b'A' * 10), (2, 90, b'B' * 4)])))
  path = tmp_path / 'libfake.so'
  path.write_bytes(original)
  assert strip_fatbins.main(['--dry_run', str(path)]) == 0
  assert path.read_bytes() == original
  assert json.loads(capsys.readouterr().out)['zeroed_bytes'] == 10
  assert strip_fatbins.main([str(path)]) == 0
  assert b'A' not in path.read_bytes() and len(path.read_bytes()) == len(
      original)


def test_a_missing_or_empty_library(strip_fatbins, tmp_path, capsys):
  empty = tmp_path / 'libempty.so'
  empty.write_bytes(b'')
  assert strip_fatbins.main([str(empty)]) == 0
  assert json.loads(capsys.readouterr().out)['blobs'] == 0
  missing = str(tmp_path / 'libmissing.so')
  assert strip_fatbins.main([missing]) == 2
  err = capsys.readouterr().err
  assert missing in err and len(err.strip().splitlines()) == 1
