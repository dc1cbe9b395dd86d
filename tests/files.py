"""File-tree helpers for tests that check that nothing was written."""

import os
from typing import Dict


def snapshot(directory: str) -> Dict[str, bytes]:
  """Relative path -> bytes of every file under `directory`."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, directory)] = f.read()
  return files
