"""Deterministic fault injection for end-to-end searches.

Non-finite losses are provoked by putting a chosen value in a chosen place at
a chosen step, never by overflow, whose result (NaN, inf, or nothing) differs
between CPUs.
"""

from typing import Any, Callable, Mapping

import tensorflow as tf

tf1 = tf.compat.v1


class PoisonedInput:
  """A search input function with one feature replaced in one element.

  Element `index` of the dataset (0-based) feeds global step `index` of a
  fresh CPU run, i.e. step `index + 1` as checkpoints count steps.
  """

  def __init__(self, input_fn: Callable, feature: str, index: int,
               value: float):
    """Wraps `input_fn`.

    Args:
      input_fn: a TPUEstimator input function yielding (features, labels).
      feature: the key of the features dict to poison ('train_images').
      index: the element whose feature is filled with `value`.
      value: the fill value (float('inf'), float('nan'), ...).
    """
    self._input_fn = input_fn
    self._feature = feature
    self._index = index
    self._value = value

  def __call__(self, params: Mapping[str, Any]) -> tf.data.Dataset:

    def poison(i, element):
      features, labels = element
      features = dict(features)
      x = features[self._feature]
      bad = tf.fill(tf.shape(x), tf.constant(self._value, x.dtype))
      features[self._feature] = tf.where(tf.equal(i, self._index), bad, x)
      return features, labels

    return self._input_fn(params).enumerate().map(poison)


class SetVariableAt(tf1.train.SessionRunHook):
  """Assigns `value` to variable `name` just before global step `step` runs.

  Simulates state that blew up on its own, e.g. the controller's reward
  baseline, which no input can make non-finite.
  """

  def __init__(self, name: str, step: int, value: float):
    self._name = name
    self._step = step
    self._value = value

  def begin(self):
    # The graph is finalized after begin(), so the assign op is built here.
    matches = [v for v in tf1.global_variables()
               if v.name == self._name + ':0']
    if len(matches) != 1:
      raise ValueError(f'no variable named {self._name!r} in the graph')
    self._assign = matches[0].assign(
        tf.constant(self._value, matches[0].dtype.base_dtype))
    self._global_step = tf1.train.get_global_step()

  def before_run(self, run_context):
    if run_context.session.run(self._global_step) == self._step:
      run_context.session.run(self._assign)


class StopAt(tf1.train.SessionRunHook):
  """Simulates a crash: raises once the global step reaches `step`.

  KeyboardInterrupt (a preemption) unless another exception is given.
  """

  def __init__(self, step: int, error: BaseException = KeyboardInterrupt(
      'simulated preemption')):
    self._step = step
    self._error = error

  def begin(self):
    self._global_step = tf1.train.get_global_step()

  def after_run(self, run_context, run_values):
    if run_context.session.run(self._global_step) >= self._step:
      raise self._error
