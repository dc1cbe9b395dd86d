"""Initialising a stand-alone network from a search's shared weights.

A stand-alone network's variables have the names of the supernet's (both are
named after spec paths, docs/DESIGN.md "Masks") and are prefix slices of them
(docs/method.md section 4). Fine-tuning inherited weights starts each variable at
that slice of the search checkpoint, with a fresh optimiser state.
"""

import dataclasses
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tunas_search.results import analysis
from tunas_search.space import serialization
from tunas_search import supernet
from tunas_search.supernet import deferred

tf1 = tf.compat.v1

# Supernet BN in search mode has no moving statistics (docs/method.md section 4);
# the stand-alone network starts those at their initial values.
_MOVING_STATISTICS = ('moving_mean', 'moving_variance')


class WarmStartError(ValueError):
  """A search cannot initialise this network; the message says why."""


def _base_name(name: str) -> str:
  return name.split(':')[0]


@dataclasses.dataclass(frozen=True)
class SearchWeights:
  """The latest checkpoint of a search, checked against one stand-alone run.

  Attributes:
    model_dir: the search's model dir.
    checkpoint: the checkpoint prefix whose weights are used.
    step: its global step.
    momentum: the search's RMSProp momentum.
    rmsprop_decay: the search's RMSProp decay.
  """
  model_dir: str
  checkpoint: str
  step: int
  momentum: float
  rmsprop_decay: float

  @classmethod
  def open(cls, search_dir: str, model_spec: Any, num_classes: int,
           input_channels: int) -> 'SearchWeights':
    """Finds a search's latest checkpoint and checks it fits the network.

    Args:
      search_dir: the search's model dir.
      model_spec: the spec the stand-alone architecture indexes.
      num_classes: the stand-alone classifier's outputs.
      input_channels: the stand-alone input channels.

    Returns:
      The checked checkpoint.

    Raises:
      WarmStartError: if the dir is not a search, has no checkpoint (a save
        in progress or unfinished is none: the state file names only whole
        ones), its latest cannot be read, it searched another spec, or its
        classifier or stem have other shapes.
    """
    try:
      search_config, search_spec = analysis.load_search(search_dir)
    except analysis.AnalysisError as e:
      raise WarmStartError(f'init_from_search: {e}') from None
    if (serialization.dumps(search_spec) != serialization.dumps(model_spec)):
      raise WarmStartError(
          f'init_from_search: {search_dir} searched {search_config.search_space!r}'
          ', a different space than this architecture indexes')
    for name, theirs, mine in (
        ('num_classes', search_config.num_classes, num_classes),
        ('input_channels', search_config.input_channels, input_channels)):
      if theirs != mine:
        raise WarmStartError(f'init_from_search: {search_dir} was searched '
                             f'with {name}={theirs}, this run has {mine}')
    checkpoint = tf.train.latest_checkpoint(search_dir)
    if not checkpoint:
      raise WarmStartError(f'init_from_search: {search_dir} has no checkpoint '
                           'yet; wait for the search to write one')
    try:
      reader = tf.train.load_checkpoint(checkpoint)
      step = int(reader.get_tensor(tf1.GraphKeys.GLOBAL_STEP))
    except (tf.errors.OpError, ValueError) as e:
      raise WarmStartError(
          f'init_from_search: cannot read checkpoint {checkpoint} of '
          f'{search_dir}: {_message(e)}') from None
    return cls(search_dir, checkpoint, step, search_config.model_momentum,
               search_config.model_rmsprop_decay)

  def values_for(self, variables: Sequence[tf.Variable]
                 ) -> Dict[str, np.ndarray]:
    """Reads the supernet values of `variables` (only those) by name.

    A weight whose RMSProp steps the search deferred (it was unused since
    some step) takes the steps it missed, so every value is the one TuNAS's
    optimiser gives at the checkpoint's step (`supernet.deferred`).

    Raises:
      WarmStartError: naming a variable (other than a BN moving statistic)
        that the checkpoint lacks.
    """
    return deferred.caught_up(
        read_values(self.checkpoint, variables),
        tf.train.load_checkpoint(self.checkpoint), self.step, self.momentum,
        self.rmsprop_decay)

  def assignments(self, variables: Sequence[tf.Variable]
                  ) -> List[Tuple[tf.Variable, np.ndarray]]:
    """`(variable, sliced value)` pairs; see `supernet_assignments`."""
    values = self.values_for(variables)
    try:
      return supernet.supernet_assignments(values, variables)
    except (KeyError, ValueError) as e:
      raise WarmStartError(f'init_from_search {self.checkpoint}: '
                           f'{_message(e)}') from None


def _message(error: Exception) -> str:
  return str(error.args[0] if error.args else error).splitlines()[0]


def read_values(checkpoint: str, variables: Sequence[tf.Variable]
                ) -> Dict[str, np.ndarray]:
  """Reads the checkpoint values named like `variables`.

  Only the needed tensors are read: a search checkpoint also holds the
  optimiser slots and controller, several times the network's size.

  Raises:
    WarmStartError: naming the first variable (other than a BN moving
      statistic) that `checkpoint` lacks.
  """
  reader = tf.train.load_checkpoint(checkpoint)
  values = {}
  for var in variables:
    name = _base_name(var.name)
    if reader.has_tensor(name):
      values[name] = reader.get_tensor(name)
    elif name.rsplit('/', 1)[-1] not in _MOVING_STATISTICS:
      raise WarmStartError(
          f'init_from_search: checkpoint {checkpoint} has no variable '
          f'{name!r}; was it written by a search of this space?')
  return values


def scaffold_init_fn(pairs: Sequence[Tuple[tf.Variable, np.ndarray]]
                     ) -> Callable[[Any, tf1.Session], None]:
  """A `Scaffold.init_fn` loading `pairs` into a fresh session.

  A Scaffold runs its init_fn only when the session starts without a
  checkpoint, so a resumed run keeps its own trained weights. Values are fed
  to each variable's initializer: nothing is added to the (finalised) graph
  and no value is embedded in it as a constant.
  """
  def init_fn(scaffold, session):
    del scaffold
    for var, value in pairs:
      initial = var.initializer.inputs[1]
      session.run(var.initializer, {initial: value.astype(
          var.dtype.base_dtype.as_numpy_dtype)})
  return init_fn
