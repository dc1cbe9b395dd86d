"""One-shot accuracy: a candidate scored with a supernet's inherited weights.

The candidate is built stand-alone (only its ops, its exact widths) and its
variables start at the prefix slices of the search's shared weights
(`standalone.SearchWeights`, docs/DESIGN.md "Masks"), which is the network
the supernet computes for that architecture. As during the search, BN
normalises with each batch's own statistics (docs/method.md section 4), so
the batch size is part of the score: by default the search's validation
batch per replica. The batches are the first ones of the held-out
validation split in stored order, the same for every candidate and supernet.
"""

import dataclasses
from typing import Any, List, Optional, Sequence

import tensorflow as tf

from tunas_search import architecture
from tunas_search import data
from tunas_search import supernet
from tunas_search.config import SearchConfig
from tunas_search.standalone import warm_start

tf1 = tf.compat.v1
SPLIT = 'validation'


@dataclasses.dataclass(frozen=True)
class Supernet:
  """A finished search whose shared weights score candidates.

  Attributes:
    model_dir: the search's model dir.
    config: its config.
  """
  model_dir: str
  config: SearchConfig


def default_batch_size(config: SearchConfig) -> int:
  """The search's validation batch on one replica: what its BN saw."""
  return max(1, config.validation_batch_size // config.num_replicas)


def _dataset(config: SearchConfig, data_dir: Optional[str], batch_size: int,
             num_batches: Optional[int]) -> tf.data.Dataset:
  input_fn = data.ClassifierInputFn(
      config.dataset, data_dir, SPLIT, config.image_size, is_training=False,
      drop_remainder=True)
  ds = input_fn({'batch_size': batch_size})
  return ds.take(num_batches) if num_batches else ds


def accuracies(spec: Any, indices: Sequence[int],
               supernets: Sequence[Supernet], *, batch_size: int,
               num_batches: Optional[int],
               data_dir: Optional[str] = None) -> List[float]:
  """Top-1 accuracy of one architecture under each supernet.

  Args:
    spec: the searched model spec (every supernet searched it).
    indices: the candidate's architecture.
    supernets: the searches whose weights to use, all of one dataset and
      image size.
    batch_size: images per batch (BN statistics are per batch).
    num_batches: batches to score; None for every full batch of the split.
    data_dir: the dataset's data directory (default: the first search's).

  Returns:
    One accuracy in [0, 1] per supernet, over the same images.

  Raises:
    standalone.WarmStartError: if a search cannot initialise the network.
    ValueError: if the split has no full batch.
  """
  first = supernets[0].config
  masked = architecture.with_indices(spec, indices)
  with tf.Graph().as_default():
    iterator = tf1.data.make_initializable_iterator(_dataset(
        first, data_dir or first.data_dir, batch_size, num_batches))
    images, labels = iterator.get_next()
    before = {v.name for v in tf1.global_variables()}
    logits = supernet.build_network(
        masked, images, first.num_classes, is_training=False,
        batch_norm_mode='batch')
    variables = [v for v in tf1.global_variables() if v.name not in before]
    hits = tf.reduce_sum(tf.cast(tf.equal(
        tf.argmax(logits, -1, output_type=tf.int32),
        tf.cast(labels, tf.int32)), tf.int64))
    size = tf.shape(labels, out_type=tf.int64)[0]
    out = []
    with tf1.Session() as session:
      for net in supernets:
        weights = warm_start.SearchWeights.open(
            net.model_dir, spec, net.config.num_classes,
            net.config.input_channels)
        warm_start.scaffold_init_fn(weights.assignments(variables))(None,
                                                                    session)
        out.append(_score(session, iterator, hits, size))
  return out


def _score(session, iterator, hits, size) -> float:
  session.run(iterator.initializer)
  right = seen = 0
  while True:
    try:
      h, n = session.run([hits, size])
    except tf.errors.OutOfRangeError:
      break
    right, seen = right + int(h), seen + int(n)
  if not seen:
    raise ValueError(f'the {SPLIT} split has no full batch of this size')
  return right / seen
