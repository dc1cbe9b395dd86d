"""One-shot accuracy: a candidate scored with a supernet's inherited weights.

The network is the search's own validation pass (`search.validation_logits`):
the supernet under the candidate's one-hot masks, in the search's step plan
(its width form and compute dtype), with its shared weights as its last
checkpoint holds them (deferred RMSProp steps caught up,
`standalone.SearchWeights`). As during the search, BN normalises with each
batch's own statistics (docs/method.md section 4), so the batch size is part
of the score: by default the search's validation batch per replica. The
batches are the first ones of the held-out validation split in stored order,
the same for every candidate and supernet.

Each supernet's graph is built and its weights loaded once (`Scorer`); a
candidate then costs its forward passes only.
"""

import dataclasses
from typing import Any, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search import data
from tunas_search.space import schema
from tunas_search.search import model_fn as search
from tunas_search.config import SearchConfig
from tunas_search.config.plan import StepPlan
from tunas_search.standalone import warm_start

tf1 = tf.compat.v1
SPLIT = 'validation'


@dataclasses.dataclass(frozen=True)
class Supernet:
  """A finished search whose shared weights score candidates.

  Attributes:
    model_dir: the search's model dir.
    config: its config.
    step_plan: the form its steps took (`config.plan.previous`).
  """
  model_dir: str
  config: SearchConfig
  step_plan: StepPlan


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


class _Session:
  """One supernet's validation pass in a session, its weights loaded."""

  def __init__(self, net: Supernet, spec: Any, batch_size: int,
               num_batches: Optional[int], data_dir: Optional[str]):
    self._graph = tf.Graph()
    with self._graph.as_default():
      self._iterator = tf1.data.make_initializable_iterator(_dataset(
          net.config, data_dir or net.config.data_dir, batch_size,
          num_batches))
      images, labels = self._iterator.get_next()
      self._masks = [tf1.placeholder(tf.float32, [d.num_choices])
                     for d in schema.decisions(spec)]
      # The XLA form computes the same network with functional conds, which
      # only an XLA compile needs (docs/xla.md); scored here, it is built
      # as a graph search builds its validation pass.
      logits = search.validation_logits(
          net.config, dataclasses.replace(net.step_plan, xla=False),
          schema.with_masks(spec, self._masks), images)
      variables = tf1.global_variables()
      self._hits = tf.reduce_sum(tf.cast(tf.equal(
          tf.argmax(logits, -1, output_type=tf.int32),
          tf.cast(labels, tf.int32)), tf.int64))
      self._size = tf.shape(labels, out_type=tf.int64)[0]
      weights = warm_start.SearchWeights.open(
          net.model_dir, spec, net.config.num_classes,
          net.config.input_channels)
      self._session = tf1.Session()
      warm_start.scaffold_init_fn(weights.assignments(variables))(
          None, self._session)

  def accuracy(self, masks: Sequence[np.ndarray]) -> float:
    feed = dict(zip(self._masks, masks))
    self._session.run(self._iterator.initializer)
    right = seen = 0
    while True:
      try:
        h, n = self._session.run([self._hits, self._size], feed)
      except tf.errors.OutOfRangeError:
        break
      right, seen = right + int(h), seen + int(n)
    if not seen:
      raise ValueError(f'the {SPLIT} split has no full batch of this size')
    return right / seen

  def close(self) -> None:
    self._session.close()


class Scorer:
  """Scores architectures one-shot under every supernet of a list.

  Use as a context manager (it holds one session per supernet).
  """

  def __init__(self, spec: Any, supernets: Sequence[Supernet], *,
               batch_size: int, num_batches: Optional[int],
               data_dir: Optional[str] = None):
    """Builds each supernet's validation pass and loads its weights.

    Args:
      spec: the searched model spec (every supernet searched it).
      supernets: the searches whose weights to use, all of one dataset and
        image size.
      batch_size: images per batch (BN statistics are per batch).
      num_batches: batches to score; None for every full batch of the split.
      data_dir: the dataset's data directory (default: each search's).

    Raises:
      standalone.WarmStartError: if a search cannot initialise the network.
    """
    self._spec = spec
    self._sessions: List[_Session] = []
    try:
      for net in supernets:
        self._sessions.append(
            _Session(net, spec, batch_size, num_batches, data_dir))
    except BaseException:
      self.close()
      raise

  def accuracies(self, indices: Sequence[int]) -> List[float]:
    """Top-1 accuracy of one architecture under each supernet.

    Args:
      indices: the candidate's architecture (one choice per decision).

    Returns:
      One accuracy in [0, 1] per supernet, over the same images.

    Raises:
      ValueError: if `indices` is not an architecture of the spec, or the
        split has no full batch.
    """
    masks = architecture.one_hot_masks(self._spec, indices)
    return [s.accuracy(masks) for s in self._sessions]

  def close(self) -> None:
    for s in self._sessions:
      s.close()

  def __enter__(self) -> 'Scorer':
    return self

  def __exit__(self, *unused) -> None:
    self.close()
