"""Shared test set-up: quiet TensorFlow, import paths, reproducible seeds."""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# Tests never touch the network: TFDS must not try to reach GCS.
os.environ.setdefault('TFDS_DISABLE_GCS', '1')
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)
