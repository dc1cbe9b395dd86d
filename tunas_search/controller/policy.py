"""The REINFORCE controller: logits, sampling, log-prob, entropy and warm-up.

One zero-initialised logits vector per decision (docs/method.md section 5),
stored as a row of one variable per number of choices. Every
step the controller samples one choice per decision and returns one mask per
decision for the supernet builder, together with the log-probability and the
entropy of the sample. Both are sums over decisions, counting a decision only
when every choice above it on its path is selected (hierarchical), so a
skipped layer's kernel size neither costs nor earns anything.

Warm-up (docs/method.md section 5): with probability `increase_ops_prob` an `op`
decision's mask becomes the uniform vector 1/n (all ops run, outputs
averaged), and with probability `increase_filters_prob` a `filters` decision
takes its widest choice (by value). The log-probability accounts for that coin
flip, so the REINFORCE gradient stays the gradient of the log-probability of
what actually ran.

Everything in the step is plain TensorFlow (no py_function, no strings), so it
runs inside a TPUEstimator model_fn. `argmax_indices`, `probabilities` and
`read_logit_values` are numpy helpers for after the search.
"""

import re
from typing import (Any, Dict, List, Mapping, NamedTuple, Optional, Sequence,
                    Union)

import numpy as np
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.space import schema

# The controller's variable scope (logits, baseline, Adam slots) and summary
# prefix, as TuNAS names it; checkpoints depend on it. Defined here only:
# search.CONTROLLER_SCOPE and analysis's tags are this constant.
DEFAULT_SCOPE = 'rlcontroller'
_LOGITS_SCOPE = 'logits'

FloatLike = Union[float, tf.Tensor]
# Every replica computes the same update of a controller variable from
# cross-replica means, so under a tf.distribute strategy the first replica's
# assignment is the one kept (no effect on one replica or on TPU).
REPLICATED = tf.VariableAggregation.ONLY_FIRST_REPLICA


class ControllerSample(NamedTuple):
  """One sampled architecture (D = number of decisions).

  Attributes:
    masks: one float32 [num_choices] tensor per decision, in traversal order:
      one-hot, or uniform 1/n under op warm-up. Attach with
      `schema.with_masks`.
    indices: int32 [D], the chosen index per decision (the sampled one under
      op warm-up; the widest under filter warm-up). Its `:`-joined form is the
      architecture string.
    log_prob: float32 scalar, sum of `counted * log_probs`.
    entropy: float32 scalar, sum of `counted * entropies`.
    counted: float32 [D], 1 where every enclosing choice is selected.
    warmup: bool [D], True where warm-up replaced the sample (always False
      for one-choice decisions).
    log_probs: float32 [D], each decision's log-probability contribution
      before the hierarchical weighting.
    entropies: float32 [D], each decision's categorical entropy of
      softmax(logits / temperature) before the hierarchical weighting.
  """
  masks: List[tf.Tensor]
  indices: tf.Tensor
  log_prob: tf.Tensor
  entropy: tf.Tensor
  counted: tf.Tensor
  warmup: tf.Tensor
  log_probs: tf.Tensor
  entropies: tf.Tensor


def variable_name(num_choices: int, scope: str = DEFAULT_SCOPE) -> str:
  """Checkpoint name of the logits of the decisions with `num_choices`
  choices, e.g. `rlcontroller/logits/choices_3`: one [m, num_choices]
  variable, row k for the k-th such decision in traversal order
  (`rows_by_size`)."""
  return f'{scope}/{_LOGITS_SCOPE}/choices_{num_choices}'


def legacy_variable_name(decision: schema.Decision,
                         scope: str = DEFAULT_SCOPE) -> str:
  """Name of a decision's own logits variable in checkpoints written before
  the logits were grouped (tunas_search 0.1.0 development versions), e.g.
  `rlcontroller/logits/a/b`; `read_logit_values` still reads them."""
  return f'{scope}/{_LOGITS_SCOPE}/{decision.path or "root"}'


def path_logit_tag(decision: schema.Decision, choice: int) -> str:
  """Summary tag of one logit by decision path: `rlpathlogits/<path>/<j>`."""
  return f'rlpathlogits/{decision.path}/{choice}'


def tag_logit_tag(decision: schema.Decision, choice: int) -> str:
  """Summary tag of one logit by tag name: `rltaglogits/op_indices_7/<j>`."""
  return f'rltaglogits/{decision.tag_name}/{choice}'


def create_logits(decisions: Sequence[schema.Decision],
                  scope: str = DEFAULT_SCOPE) -> Dict[int, tf.Variable]:
  """Creates (or reuses) the zero-initialised logits variables.

  Zero logits make the initial distribution uniform (docs/method.md section
  5). The decisions with n choices share one [m, n] variable, one row each:
  the controller's update is then a few ops per group instead of one set per
  decision (86 decisions in `mobilenet_v3_like_search`: 3,900 fewer graph
  ops and 2-9% off its XLA compile, docs/xla.md). A one-choice decision has no
  variable: its choice has probability 1 whatever its logit, which stays 0.

  Args:
    decisions: `schema.decisions(spec)`.
    scope: variable scope of the controller.

  Returns:
    {n: trainable float32 variable of shape [m, n]} for every n > 1 among
    the decisions' numbers of choices, named `variable_name(n, scope)`.
  """
  logits = {}
  with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
    with tf.compat.v1.variable_scope(_LOGITS_SCOPE):
      for n, rows in sorted(rows_by_size(decisions).items()):
        logits[n] = tf.compat.v1.get_variable(
            f'choices_{n}', shape=[len(rows), n], dtype=tf.float32,
            initializer=tf.compat.v1.zeros_initializer(), trainable=True,
            aggregation=REPLICATED)
  return logits


def decision_logits(decisions: Sequence[schema.Decision],
                    groups: Mapping[int, Any]) -> List[tf.Tensor]:
  """Each decision's float32 [num_choices] logits, in decision order.

  Args:
    decisions: `schema.decisions(spec)`.
    groups: {n: [m, n] values}, as `create_logits` returns (variables) or
      tensors read from them.

  Returns:
    The rows of `groups`; a constant [0.0] for each one-choice decision.
  """
  out = [tf.zeros([1])] * len(decisions)
  for n, rows in rows_by_size(decisions).items():
    values = tf.convert_to_tensor(groups[n])
    if values.shape.rank is not None and values.shape[0] != len(rows):
      raise ValueError(f'logits for {n} choices have shape {values.shape}; '
                       f'expected [{len(rows)}, {n}]')
    for i, row in zip(rows, tf.unstack(values, num=len(rows))):
      out[i] = row
  return out


def grouped_values(decisions: Sequence[schema.Decision],
                   values: Sequence[Any]) -> Dict[int, np.ndarray]:
  """Per-decision logits (numpy) arranged as `create_logits` stores them:
  {n: float32 [m, n]}; one-choice decisions' values are dropped."""
  _check_lengths(decisions, values)
  return {n: np.stack([np.asarray(values[i], np.float32) for i in rows])
          for n, rows in rows_by_size(decisions).items()}


def grouped_tensors(decisions: Sequence[schema.Decision],
                    logits: Sequence[Any]) -> Dict[int, tf.Tensor]:
  """Per-decision logit tensors stacked as `create_logits` stores them:
  {n: float32 [m, n]}; one-choice decisions' tensors are dropped."""
  _check_lengths(decisions, logits)
  return {n: tf.stack([logits[i] for i in rows])
          for n, rows in rows_by_size(decisions).items()}


def logits_by_path(decisions: Sequence[schema.Decision],
                   logits: Sequence) -> Dict[str, object]:
  """Maps each decision's path to its logits (variable, tensor or array)."""
  _check_lengths(decisions, logits)
  return {d.path: l for d, l in zip(decisions, logits)}


def logits_by_tag_name(decisions: Sequence[schema.Decision],
                       logits: Sequence) -> Dict[str, object]:
  """Maps each decision's tag name (`op_indices_7`) to its logits."""
  _check_lengths(decisions, logits)
  return {d.tag_name: l for d, l in zip(decisions, logits)}


def _check_lengths(decisions: Sequence[schema.Decision],
                   logits: Sequence) -> None:
  if len(decisions) != len(logits):
    raise ValueError(f'got {len(logits)} logits for {len(decisions)} '
                     'decisions')


def _check_shapes(decisions: Sequence[schema.Decision],
                  logits: Sequence[tf.Tensor]) -> None:
  _check_lengths(decisions, logits)
  for d, l in zip(decisions, logits):
    shape = l.shape
    if shape.rank is not None and shape.as_list() not in ([d.num_choices],
                                                          [None]):
      raise ValueError(f'logits for {d.path} have shape {shape}; expected '
                       f'[{d.num_choices}]')


def _safe_log(x: tf.Tensor) -> tf.Tensor:
  """log(x) where x > 0, else 0.

  Only used for a branch of `tf.where` that cannot be taken when x == 0 (a
  warm-up coin with p = 0 never comes up, with p = 1 always does), so the
  value is never -inf and no gradient can become NaN.
  """
  return tf.math.log(tf.where(x > 0, x, tf.ones_like(x)))


class _Draws(NamedTuple):
  """The draws of m decisions with n choices each (one row per decision)."""
  masks: tf.Tensor     # float32 [m, n]
  indices: tf.Tensor   # int32 [m]
  log_probs: tf.Tensor  # float32 [m]
  entropies: tf.Tensor  # float32 [m]
  warmup: tf.Tensor    # bool [m]


def _draw_rows(decisions: Sequence[schema.Decision], logits: tf.Tensor,
               temperature: tf.Tensor, gumbel: tf.Tensor, coins: tf.Tensor,
               probs: Dict[str, tf.Tensor]) -> _Draws:
  """Samples m decisions that have the same number n > 1 of choices.

  One row per decision, computed together: a step of a full space then has
  a few dozen sampling ops instead of ~15 per decision (86 decisions for
  `mobilenet_v3_like_search`), which mattered on the CPU (per-op overhead)
  and under XLA (one fusion per op and decision; docs/xla.md). Each row is
  computed exactly as it would be alone (row-wise softmax and sums).

  Args:
    decisions: the m decisions.
    logits: float32 [m, n].
    temperature: float32 scalar.
    gumbel: float32 [m, n] standard Gumbel noise.
    coins: float32 [m] uniforms in (0, 1) for the warm-up coins.
    probs: the warm-up probability (float32 scalar) of each tag.
  """
  n = decisions[0].num_choices
  log_p = tf.nn.log_softmax(logits / temperature)
  # Gumbel-max trick: argmax(log p + Gumbel noise) ~ Categorical(p)
  # (Gumbel 1954; Maddison et al. 2014, "A* sampling", section 2).
  sampled = tf.argmax(log_p + gumbel, axis=-1, output_type=tf.int32)
  entropies = -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)
  is_filters = np.array([d.tag == schema.FILTERS for d in decisions])
  warmup_prob = tf.where(is_filters, probs[schema.FILTERS], probs[schema.OP])
  warmup = coins < warmup_prob
  # Filter warm-up trains the widest choice, by value; op warm-up runs every
  # op and the builder averages them (docs/method.md section 5).
  widest = np.array([architecture.widest_index(d) if f else 0
                     for d, f in zip(decisions, is_filters)], np.int32)
  indices = tf.where(tf.logical_and(warmup, is_filters), widest, sampled)
  op_warmup = tf.logical_and(warmup, np.logical_not(is_filters))
  masks = tf.where(op_warmup[:, None], tf.fill(tf.shape(logits), 1.0 / n),
                   tf.one_hot(indices, n, dtype=tf.float32))
  log_probs = tf.where(
      warmup, _safe_log(warmup_prob),
      _safe_log(1.0 - warmup_prob)
      + tf.gather(log_p, sampled, axis=1, batch_dims=1))
  return _Draws(masks, indices, log_probs, entropies, warmup)


_MASK32 = 0xFFFFFFFF


def _mul32(h: tf.Tensor, constant: int) -> tf.Tensor:
  """(h * constant) mod 2^32 for int64 h in [0, 2^32), without overflow.

  Split into 16-bit halves so that no product reaches 2^63: integer
  overflow is not something a test (or XLA vs a CPU kernel) may rely on.
  """
  low, high = tf.bitwise.bitwise_and(h, 0xFFFF), tf.bitwise.right_shift(h, 16)
  product = low * constant + tf.bitwise.left_shift(
      (high * (constant & 0xFFFF)) % 65536, 16)
  return tf.bitwise.bitwise_and(product, _MASK32)


def _mix32(h: tf.Tensor) -> tf.Tensor:
  """MurmurHash3's 32-bit finaliser (Appleby 2008): avalanches every bit."""
  h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 16))
  h = _mul32(h, 0x85EBCA6B)
  h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 13))
  h = _mul32(h, 0xC2B2AE35)
  return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 16))


def counter_uniform(seed: tf.Tensor, n: int) -> tf.Tensor:
  """n float32 numbers in (0, 1), a pure function of the integer `seed`.

  A counter-based generator made of integer ops only (hash of the seed's
  entries and the draw's index), so the numbers are bit-identical on CPU,
  GPU, TPU and under XLA; TensorFlow's stateless random ops are not (XLA
  implements them with other bits than the CPU kernels).

  Args:
    seed: int32 or int64 vector, e.g. (seed, step, replica).
    n: how many numbers.
  """
  seed = tf.bitwise.bitwise_and(tf.cast(seed, tf.int64), _MASK32)
  h = tf.range(n, dtype=tf.int64)
  for i in range(int(seed.shape[0])):
    h = _mix32(tf.bitwise.bitwise_xor(_mix32(h), seed[i]))
  return _centred_unit(tf.bitwise.right_shift(_mix32(h), 8))


def _centred_unit(top: tf.Tensor) -> tf.Tensor:
  """float32 `(top + 0.5) / 2^24` for int64 `top` in [0, 2^24).

  Never 0 or 1, so both logs of the Gumbel noise stay finite. Computed as
  the sum of two exact parts (the top 12 bits, and the low 12 bits + 0.5),
  which rounds once, as `(float32(top) + 0.5) * 2^-24` does: the same
  numbers (tests/controller/test_policy.py checks all 2^24). The reduction is for
  XLA, whose fusion copies a chain of cheap ops into every consumer but
  never a reduction's input: without it each decision's fusion carried the
  whole integer hash (docs/xla.md, "Where the time goes").
  """
  parts = tf.stack([tf.bitwise.right_shift(top, 12),
                    tf.bitwise.bitwise_and(top, 0xFFF)], axis=-1)
  scaled = ((tf.cast(parts, tf.float32) + [0.0, 0.5])
            * [1.0 / (1 << 12), 1.0 / (1 << 24)])
  return tf.reduce_sum(scaled, axis=-1)


def _counted(decisions: Sequence[schema.Decision],
             masks: Sequence[tf.Tensor]) -> tf.Tensor:
  """float32 [D]: 1 where every (parent, choice) above a decision is on."""
  starts = np.cumsum([0] + [d.num_choices for d in decisions])
  required = [(k, starts[parent] + choice)
              for k, d in enumerate(decisions) for parent, choice in d.parents]
  if not required:
    return tf.ones([len(decisions)])
  segments, positions = zip(*required)
  on = tf.cast(tf.gather(tf.concat(masks, 0), positions) > 0, tf.float32)
  # Counts of 0/1 are exact: counted when all required choices are on.
  parents_on = tf.math.unsorted_segment_sum(on, segments, len(decisions))
  needed = np.array([len(d.parents) for d in decisions], np.float32)
  return tf.cast(tf.equal(parents_on, needed), tf.float32)


def rows_by_size(decisions: Sequence[schema.Decision]) -> Dict[int, List[int]]:
  """The positions of the multi-choice decisions, by number of choices.

  Decisions with the same number of choices are computed as the rows of one
  tensor (sampling here, probabilities in the search's summaries): a few
  ops per group instead of ~15 per decision, on the CPU and under XLA
  (docs/xla.md, "One set of ops per decision").
  """
  rows: Dict[int, List[int]] = {}
  for i, d in enumerate(decisions):
    if d.num_choices > 1:
      rows.setdefault(d.num_choices, []).append(i)
  return rows


def sample(decisions: Sequence[schema.Decision],
           logits: Sequence[tf.Tensor],
           *,
           increase_ops_prob: FloatLike,
           increase_filters_prob: FloatLike,
           temperature: FloatLike = 1.0,
           seed: Optional[int] = None,
           stateless_seed: Optional[tf.Tensor] = None) -> ControllerSample:
  """Samples an architecture from the controller (docs/method.md section 5).

  Each decision draws from Categorical(softmax(logits / temperature)). All
  randomness comes from one uniform draw: stateless from `stateless_seed`
  (what a search uses), else a stateful op seeded by `seed`.

  Args:
    decisions: `schema.decisions(spec)`.
    logits: one float32 [num_choices] tensor or variable per decision.
    increase_ops_prob: float32 scalar in [0, 1], the op warm-up probability.
    increase_filters_prob: float32 scalar in [0, 1], the filter warm-up
      probability.
    temperature: float32 scalar > 0 dividing the logits.
    seed: op-level seed, for tests only.
    stateless_seed: optional integer vector (the search passes (seed, step,
      replica)); when given, the draws are `counter_uniform(stateless_seed)`:
      replicas sample different architectures, and runs are reproducible,
      bit for bit on any device and under XLA.

  Returns:
    A `ControllerSample`.

  Raises:
    ValueError: if the logits do not match the decisions.
  """
  _check_shapes(decisions, logits)
  temperature = tf.cast(temperature, tf.float32)
  probs = {schema.OP: tf.cast(increase_ops_prob, tf.float32),
           schema.FILTERS: tf.cast(increase_filters_prob, tf.float32)}
  multi = [i for i, d in enumerate(decisions) if d.num_choices > 1]
  # The k-th multi-choice decision's noise starts at starts[k] (decision
  # order); its warm-up coin is the k-th after all the noise.
  starts = np.cumsum([0] + [decisions[i].num_choices for i in multi])
  total = int(starts[-1])
  # Gumbel noise for every choice, then one warm-up coin per decision. The
  # lower bound keeps both logs finite.
  tiny = np.finfo(np.float32).tiny
  if stateless_seed is not None:
    uniform = counter_uniform(stateless_seed, total + len(multi))
  else:
    uniform = tf.random.uniform([total + len(multi)], minval=tiny, maxval=1.0,
                                dtype=tf.float32, seed=seed)
  gumbel = -tf.math.log(-tf.math.log(uniform[:total]))
  coins = uniform[total:]
  rank = {i: k for k, i in enumerate(multi)}
  masks: List[tf.Tensor] = [tf.constant([1.0])] * len(decisions)
  # Per-decision values, gathered into decision order below; one-choice
  # decisions read the trailing fixed entries (index 0, nothing counted).
  parts = {name: [] for name in _Draws._fields if name != 'masks'}
  order = np.full(len(decisions), -1)
  position = 0
  for n, rows in sorted(rows_by_size(decisions).items()):
    draws = _draw_rows(
        [decisions[i] for i in rows],
        tf.stack([tf.cast(logits[i], tf.float32) for i in rows]),
        temperature,
        tf.gather(gumbel, [[starts[rank[i]] + j for j in range(n)]
                           for i in rows]),
        tf.gather(coins, [rank[i] for i in rows]), probs)
    for i, mask in zip(rows, tf.unstack(draws.masks)):
      masks[i] = mask
    for name in parts:
      parts[name].append(getattr(draws, name))
    order[rows] = np.arange(position, position + len(rows))
    position += len(rows)
  order[order < 0] = position  # The fixed entry.
  fixed = {'indices': tf.constant([0], tf.int32),
           'log_probs': tf.constant([0.0]), 'entropies': tf.constant([0.0]),
           'warmup': tf.constant([False])}
  values = {name: tf.gather(tf.concat(parts[name] + [fixed[name]], 0), order)
            for name in parts}
  counted = _counted(decisions, masks)
  return ControllerSample(
      masks=masks,
      indices=values['indices'],
      log_prob=tf.reduce_sum(counted * values['log_probs']),
      entropy=tf.reduce_sum(counted * values['entropies']),
      counted=counted,
      warmup=values['warmup'],
      log_probs=values['log_probs'],
      entropies=values['entropies'])


def probabilities(logit_values: Sequence[np.ndarray]) -> List[np.ndarray]:
  """Softmax of each decision's logits (numpy, float64).

  Args:
    logit_values: one [num_choices] array per decision.

  Returns:
    One probability vector per decision.
  """
  out = []
  for values in logit_values:
    values = np.asarray(values, dtype=np.float64)
    e = np.exp(values - values.max())
    out.append(e / e.sum())
  return out


def argmax_indices(logit_values: Sequence[np.ndarray]) -> List[int]:
  """The most likely choice per decision: the final architecture.

  docs/method.md section 7, "Final architecture".

  Ties go to the lowest index.
  """
  return [int(np.argmax(values)) for values in logit_values]


def read_logit_values(checkpoint: str, decisions: Sequence[schema.Decision],
                      scope: str = DEFAULT_SCOPE) -> List[np.ndarray]:
  """Reads every decision's logits from a checkpoint.

  Checkpoints in the older layout (one variable per decision,
  `legacy_variable_name`) are read too.

  Args:
    checkpoint: a checkpoint prefix or a directory holding checkpoints.
    decisions: `schema.decisions(spec)` of the searched spec.
    scope: the controller scope used when the checkpoint was written.

  Returns:
    One float32 [num_choices] array per decision; [0.0] for one-choice
    decisions in the grouped layout.

  Raises:
    KeyError: naming the first variable missing from the checkpoint, or one
      whose shape does not fit the decisions.
  """
  reader = tf.train.load_checkpoint(checkpoint)
  if has_legacy_logits(checkpoint, scope):
    return _read_legacy(reader, checkpoint, decisions, scope)
  groups = rows_by_size(decisions)
  values = [np.zeros([1], np.float32) for _ in decisions]
  for n, rows in groups.items():
    name = variable_name(n, scope)
    if not reader.has_tensor(name):
      raise KeyError(f'checkpoint {checkpoint} has no logits {name!r}; '
                     'was it written for another search space or scope?')
    stored = np.asarray(reader.get_tensor(name), dtype=np.float32)
    if stored.shape != (len(rows), n):
      paths = ', '.join(decisions[i].path or 'root' for i in rows[:3])
      raise KeyError(f'checkpoint {checkpoint} holds {name!r} with shape '
                     f'{list(stored.shape)}, but the spec has {len(rows)} '
                     f'decisions with {n} choices ({paths}'
                     f'{", ..." if len(rows) > 3 else ""})')
    for i, row in zip(rows, stored):
      values[i] = row
  return values


def _read_legacy(reader, checkpoint: str,
                 decisions: Sequence[schema.Decision],
                 scope: str) -> List[np.ndarray]:
  values = []
  for d in decisions:
    name = legacy_variable_name(d, scope)
    if not reader.has_tensor(name):
      raise KeyError(f'checkpoint {checkpoint} has no logits {name!r}; '
                     'was it written for another search space or scope?')
    values.append(np.asarray(reader.get_tensor(name), dtype=np.float32))
  return values


def has_legacy_logits(checkpoint: str, scope: str = DEFAULT_SCOPE) -> bool:
  """Whether `checkpoint` stores its logits one variable per decision (the
  layout before the grouped one), which today's search cannot restore."""
  prefix = f'{scope}/{_LOGITS_SCOPE}/'
  names = [name for name, _ in tf.train.list_variables(checkpoint)
           if name.startswith(prefix)]
  return bool(names) and not any(
      re.fullmatch(r'choices_\d+(/.*)?', name[len(prefix):])
      for name in names)
