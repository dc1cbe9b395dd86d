"""Reads a (possibly still running) search: final architecture and history.

A search's model dir holds `config.json`, `model_spec.json`, checkpoints with
the controller logits and TensorBoard events with every controller scalar and
every logit (`rlpathlogits/<path>/<j>`, docs/method.md section 6). The final
architecture is the argmax of each decision's logits (docs/method.md section 7),
canonicalised so that equal networks get equal strings.

This module reads and analyses; `report` renders its result as text, JSON
and CSV. `plot_history` still lives here until its callers' tests move to
`report` (a follow-up of issue 14).
"""

import dataclasses
import json
import logging as std_logging
import math
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tunas_search.space import architecture
from tunas_search.runtime import checkpoints as checkpoints_lib
from tunas_search import config as config_lib
from tunas_search.controller import policy as controller
from tunas_search import cost_models
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.space import schema
from tunas_search.space import serialization
from tunas_search.config import SearchConfig

CHECKPOINT = 'checkpoint'
EVENTS = 'events'
COST_TAG = f'{controller.DEFAULT_SCOPE}/estimated_cost'
REWARD_TAG = f'{controller.DEFAULT_SCOPE}/reward'

# (step, value) pairs of one scalar summary, in step order.
Series = List[Tuple[int, float]]


class AnalysisError(ValueError):
  """The model dir cannot be analysed (yet); the message says why."""


@dataclasses.dataclass(frozen=True)
class DecisionReport:
  """The controller's distribution over one decision.

  Attributes:
    index: the decision's position in the architecture string.
    path: its stable path in the spec.
    tag_name: its per-tag name, e.g. `op_indices_7`.
    probabilities: softmax of its logits, one entry per choice.
    choice: the chosen (argmax, then canonicalised) index.
  """
  index: int
  path: str
  tag_name: str
  probabilities: List[float]
  choice: int


@dataclasses.dataclass(frozen=True)
class Analysis:
  """What a search prefers at one step.

  Attributes:
    model_dir: the search's model dir.
    search_space: the searched space's name.
    step: global step the logits belong to.
    source: `CHECKPOINT` or `EVENTS`, where the logits were read.
    checkpoint: the checkpoint prefix read, or None for `EVENTS`.
    indices: canonical argmax architecture.
    architecture: `indices` as an architecture string.
    block_string: the pruned architecture as a block string.
    costs: estimate of every applicable cost model, name -> value.
    decisions: one report per decision, in traversal order.
    latency_precision: with a latency model file (`cost_model_file`), the
      precision of the models it was calibrated on ('float32', 'int8'),
      which `costs['measured']` estimates; else None (and left out of
      `to_dict()`).
  """
  model_dir: str
  search_space: str
  step: int
  source: str
  checkpoint: Optional[str]
  indices: List[int]
  architecture: str
  block_string: str
  costs: Dict[str, float]
  decisions: List[DecisionReport]
  latency_precision: Optional[str] = None

  def to_dict(self) -> Dict[str, Any]:
    """JSON-ready dict; costs appear both nested and as `cost/<name>`."""
    out = dataclasses.asdict(self)
    if self.latency_precision is None:
      del out['latency_precision']
    out.update({f'cost/{k}': v for k, v in sorted(self.costs.items())})
    return out

  def to_json(self) -> str:
    """`to_dict()` as indented JSON: search_result.json, `--format=json`."""
    return json.dumps(self.to_dict(), indent=2)


def load_search(model_dir: str) -> Tuple[SearchConfig, Any]:
  """Reads the config and model spec a search wrote at its start.

  Raises:
    AnalysisError: if the dir does not exist or is a file, is not a search
      dir (a train_eval run's included) or holds unreadable files.
  """
  gfile = tf.io.gfile
  if not gfile.isdir(model_dir):
    raise AnalysisError(f'model dir {model_dir} ' + (
        'is a file, not a directory' if gfile.exists(model_dir)
        else 'does not exist'))
  config_path = os.path.join(model_dir, config_lib.CONFIG_FILENAME)
  spec_path = os.path.join(model_dir, config_lib.MODEL_SPEC_FILENAME)
  for path in (config_path, spec_path):
    if not gfile.exists(path):
      raise AnalysisError(f'{model_dir} is not a search model dir: it has no '
                          f'{os.path.basename(path)}')
  try:
    with gfile.GFile(config_path) as f:
      config = SearchConfig.from_json(f.read())
    with gfile.GFile(spec_path) as f:
      spec = serialization.loads(f.read())
  except config_lib.OtherJobError as e:
    raise AnalysisError(e.of(model_dir)) from None
  except (ValueError, TypeError) as e:
    raise AnalysisError(f'cannot read the search in {model_dir}: '
                        f'{str(e).splitlines()[0]}') from None
  return config, spec


def estimated_costs(config: SearchConfig, model_spec: Any,
                    indices: Sequence[int]) -> Dict[str, float]:
  """Every applicable cost model's estimate for one architecture.

  Scored in the context the search's step used (`cost_models.context_for`),
  whatever its `cost_model`, `cost_models.NONE` included.
  """
  context = cost_models.context_for(config)
  return {name: float(cost_models.get(name).cost(model_spec, indices, context))
          for name in cost_models.applicable(
              context.space_name, model_spec, context.cost_model_file)}


def latency_precision(config: SearchConfig) -> Optional[str]:
  """What the search's latency model file was calibrated on ('float32',
  'int8'), or None without one."""
  context = cost_models.context_for(config)
  if not context.cost_model_file:
    return None
  return cost_models.measured.load(context.cost_model_file).precision


def read_scalars(model_dir: str, prefixes: Sequence[str] = ('rl',)
                 ) -> Dict[str, Series]:
  """Reads the scalar summaries of a model dir with TensorBoard's reader.

  TF2 `tf.summary.scalar` stores scalars as tensors; TF1-style scalars are
  read too. Only event files directly in `model_dir` are read (where the
  search's host_call writes). A resumed run that rewrote steps replaces the
  orphaned values, as TensorBoard itself shows them.

  Args:
    model_dir: the search's model dir.
    prefixes: keep only tags starting with one of these.

  Returns:
    tag -> [(step, value)] sorted by step; empty if there are no events yet.
  """
  # Imported here: only the analysis of events needs TensorBoard.
  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import event_accumulator as ea
  from tensorboard.util import tensor_util
  # pylint: enable=g-import-not-at-top
  accumulator = ea.EventAccumulator(
      model_dir, size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
  # The reader logs every file it reaches at INFO; a CLI report needs none.
  tb_logger = std_logging.getLogger('tensorboard')
  level = tb_logger.level
  tb_logger.setLevel(std_logging.WARNING)
  try:
    accumulator.Reload()
  finally:
    tb_logger.setLevel(level)
  tags = accumulator.Tags()
  keep = lambda tag: tag.startswith(tuple(prefixes))
  series: Dict[str, Dict[int, float]] = {}
  for tag in filter(keep, tags.get(ea.TENSORS, [])):
    for event in accumulator.Tensors(tag):
      value = tensor_util.make_ndarray(event.tensor_proto)
      if value.size == 1 and value.dtype.kind in 'biuf':  # Not the layout.
        series.setdefault(tag, {})[int(event.step)] = float(value.reshape(()))
  for tag in filter(keep, tags.get(ea.SCALARS, [])):
    for event in accumulator.Scalars(tag):
      series.setdefault(tag, {})[int(event.step)] = float(event.value)
  return {tag: sorted(values.items()) for tag, values in series.items()}


def logged_logits(scalars: Dict[str, Series],
                  decisions: Sequence[schema.Decision]
                  ) -> Dict[int, List[np.ndarray]]:
  """Every decision's logits at each step where all of them were logged.

  Returns:
    step -> one float32 [num_choices] array per decision.
  """
  tags = [controller.path_logit_tag(d, j) for d in decisions
          for j in range(d.num_choices)]
  by_tag = {tag: dict(scalars.get(tag, ())) for tag in tags}
  if not by_tag:
    return {}
  steps = set.intersection(*(set(v) for v in by_tag.values()))
  return {step: [np.array([by_tag[controller.path_logit_tag(d, j)][step]
                           for j in range(d.num_choices)], np.float32)
                 for d in decisions]
          for step in sorted(steps)}


def checkpoint_steps(model_dir: str) -> Dict[int, str]:
  """step -> checkpoint prefix: the checkpoint a rerun restores and every
  older checkpoint of the dir (`model_dir.checkpoint_prefixes`, whatever
  their names); newer ones are left over, to be saved over by the run.

  On a tie the restored checkpoint wins, then the state file's, then the
  run's own name.
  """
  latest = model_dir_lib.restore_point(model_dir)
  if latest is None:
    return {}
  inventory = checkpoints_lib.Inventory(model_dir)
  named, limit = inventory.named(), checkpoints_lib.step_of(latest)
  older = [p for p in inventory.checkpoints()
           if checkpoints_lib.step_of(p) <= limit]
  out = {}
  # Least preferred first, so that the preferred one is written last.
  for prefix in sorted(older, key=lambda p: (p in named, os.path.basename(
      p).startswith(checkpoints_lib.RUN_BASENAME + '-'))) + [latest]:
    step = _checkpoint_step(prefix)
    if step is not None:
      out[step] = prefix
  return out


def _checkpoint_step(prefix: str) -> Optional[int]:
  """The global step saved in a checkpoint; None if it is gone."""
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError, IndexError):
    # Deleted by keep_checkpoint_max while we were looking, or damaged.
    return None
  name = tf.compat.v1.GraphKeys.GLOBAL_STEP
  if reader.has_tensor(name):
    return int(reader.get_tensor(name))
  match = re.search(r'-(\d+)$', prefix)
  return int(match.group(1)) if match else None


def _pick_logits(model_dir: str, decisions: Sequence[schema.Decision],
                 step: Optional[int], scalars: Optional[Dict[str, Series]]):
  """Chooses where to read the logits: (step, source, checkpoint, values).

  Without `step`, the latest checkpoint (what `runner.read_result` reports),
  else the last logged logits. With `step`, the latest point at or before it
  among checkpoints and logged logits; a checkpoint wins a tie.
  """
  checkpoints = checkpoint_steps(model_dir)
  if step is None and checkpoints:
    last = max(checkpoints)
    return last, CHECKPOINT, checkpoints[last], None
  if scalars is None:
    scalars = read_scalars(model_dir)
  logged = logged_logits(scalars, decisions)
  if not checkpoints and not logged:
    raise AnalysisError(f'the search in {model_dir} has no checkpoint or '
                        'logged controller logits yet; try again after its '
                        'first checkpoint')
  limit = math.inf if step is None else step
  candidates = [(s, 1, CHECKPOINT) for s in checkpoints if s <= limit]
  candidates += [(s, 0, EVENTS) for s in logged if s <= limit]
  if not candidates:
    first = min(list(checkpoints) + list(logged))
    raise AnalysisError(f'no checkpoint or logged logits at or before step '
                        f'{step}; the first is at step {first}')
  chosen, _, source = max(candidates)
  if source == CHECKPOINT:
    return chosen, source, checkpoints[chosen], None
  return chosen, source, None, logged[chosen]


def _checkpoint_logits(checkpoint: str,
                       decisions: Sequence[schema.Decision]) -> List[np.ndarray]:
  """The controller logits of a checkpoint, checked against the model spec.

  Raises:
    AnalysisError: if the checkpoint cannot be read, or its logits do not
      match `model_spec.json` (other decisions, or other choice counts).
  """
  try:
    logits = controller.read_logit_values(checkpoint, decisions,
                                          controller.DEFAULT_SCOPE)
    stored = {name for name, _ in tf.train.list_variables(checkpoint)
              if name.startswith(f'{controller.DEFAULT_SCOPE}/logits/')
              # Optimizer slots (today's and tf.train.AdamOptimizer's).
              and not name.endswith(('/adam_m', '/adam_v', '/Adam',
                                     '/Adam_1'))}
  except KeyError as e:  # Its message names the checkpoint.
    raise AnalysisError(f'{config_lib.MODEL_SPEC_FILENAME} does not match: '
                        f'{e.args[0]}') from None
  except tf.errors.OpError as e:
    raise AnalysisError(f'cannot read checkpoint {checkpoint}: '
                        f'{e.message.splitlines()[0]}') from None
  expected = {controller.variable_name(n)
              for n in controller.rows_by_size(decisions)}
  if controller.has_legacy_logits(checkpoint):
    expected = {controller.legacy_variable_name(d) for d in decisions}
  extra = sorted(stored - expected)
  if extra:
    raise AnalysisError(
        f'{config_lib.MODEL_SPEC_FILENAME} does not match checkpoint '
        f'{checkpoint}: it has logits the spec has no decisions for, e.g. '
        f'{extra[0]}')
  for d, values in zip(decisions, logits):
    if values.shape != (d.num_choices,):
      raise AnalysisError(
          f'{config_lib.MODEL_SPEC_FILENAME} does not match checkpoint '
          f'{checkpoint}: decision {d.path} has {d.num_choices} choices in '
          f'the spec and {values.size} logits in the checkpoint')
  return logits


def analyze(model_dir: str, step: Optional[int] = None,
            scalars: Optional[Dict[str, Series]] = None) -> Analysis:
  """The architecture a search prefers, its costs and the probabilities.

  Args:
    model_dir: the search's model dir (the search may still be running).
    step: analyse the latest point at or before this global step; None for
      the latest checkpoint.
    scalars: `read_scalars(model_dir)` if already read (events are read only
      when needed otherwise).

  Returns:
    The analysis.

  Raises:
    AnalysisError: if the dir is not a search, has nothing to read yet, or
      its checkpoint does not match its model spec.
  """
  config, spec = load_search(model_dir)
  try:  # Never report an older step because the newest one is damaged.
    model_dir_lib.check(model_dir)
  except model_dir_lib.ModelDirError as e:
    raise AnalysisError(str(e)) from None
  decisions = schema.decisions(spec)
  found, source, checkpoint, logits = _pick_logits(model_dir, decisions, step,
                                                   scalars)
  if logits is None:
    logits = _checkpoint_logits(checkpoint, decisions)
  indices = architecture.canonicalize(spec, controller.argmax_indices(logits))
  probabilities = controller.probabilities(logits)
  return Analysis(
      model_dir=model_dir, search_space=config.search_space, step=found,
      source=source, checkpoint=checkpoint, indices=indices,
      architecture=architecture.format_indices(indices),
      block_string=architecture.block_string(architecture.prune(spec,
                                                                indices)),
      costs=estimated_costs(config, spec, indices),
      latency_precision=latency_precision(config),
      decisions=[DecisionReport(d.index, d.path, d.tag_name,
                                [float(p) for p in probs], i)
                 for d, probs, i in zip(decisions, probabilities, indices)])


def probability_history(scalars: Dict[str, Series],
                        decision: schema.Decision
                        ) -> Tuple[List[int], np.ndarray]:
  """Steps and softmax probabilities [steps, num_choices] of one decision."""
  logged = logged_logits(scalars, [decision])
  steps = sorted(logged)
  probs = [controller.probabilities(logged[s])[0] for s in steps]
  return steps, np.array(probs).reshape(len(steps), decision.num_choices)


def settle_step(history: Sequence[Tuple[int, Any]]) -> Optional[int]:
  """When a controller settled: the first step of `history` [(step,
  architecture)] after which the architecture never changes; None if it
  still changes at the last step (or there is no history)."""
  for i, (step, arch) in enumerate(history):
    if all(a == arch for _, a in history[i:]):
      return None if step == history[-1][0] else step
  return None


def logged_architectures(scalars: Dict[str, Series], model_spec: Any,
                         prefix: str = '') -> List[Tuple[int, str]]:
  """(step, argmax architecture) at every step whose logits were logged.

  Args:
    scalars: `read_scalars` of a model dir.
    model_spec: the searched spec.
    prefix: the controller's summary prefix (`retarget_<k>/` for a
      retarget's target k > 0; '' for a search's own controller).
  """
  own = {tag[len(prefix):]: series for tag, series in scalars.items()
         if tag.startswith(prefix)}
  decisions = schema.decisions(model_spec)
  return [(step, architecture.canonicalize(
      model_spec, controller.argmax_indices(logits)))
          for step, logits in logged_logits(own, decisions).items()]
