"""Reads a (possibly still running) search: final architecture and history.

A search's model dir holds `config.json`, `model_spec.json`, checkpoints with
the controller logits and TensorBoard events with every controller scalar and
every logit (`rlpathlogits/<path>/<j>`, SPEC.md section 6). The final
architecture is the argmax of each decision's logits (SPEC.md section 7),
canonicalised so that equal networks get equal strings.
"""

import csv
import dataclasses
import io
import json
import logging as std_logging
import math
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tunas_search import architecture
from tunas_search import config as config_lib
from tunas_search import controller
from tunas_search import cost_models
from tunas_search import schema
from tunas_search import serialization
from tunas_search.config import SearchConfig

FORMATS = ('text', 'json', 'csv')
CHECKPOINT = 'checkpoint'
EVENTS = 'events'
COST_TAG = 'rlcontroller/estimated_cost'
REWARD_TAG = 'rlcontroller/reward'

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

  def to_dict(self) -> Dict[str, Any]:
    """JSON-ready dict; costs appear both nested and as `cost/<name>`."""
    out = dataclasses.asdict(self)
    out.update({f'cost/{k}': v for k, v in sorted(self.costs.items())})
    return out


def load_search(model_dir: str) -> Tuple[SearchConfig, Any]:
  """Reads the config and model spec a search wrote at its start.

  Raises:
    AnalysisError: if the dir does not exist, is not a search dir or holds
      unreadable files.
  """
  gfile = tf.io.gfile
  if not gfile.isdir(model_dir):
    raise AnalysisError(f'model dir {model_dir} does not exist')
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
  except (ValueError, TypeError) as e:
    raise AnalysisError(f'cannot read the search in {model_dir}: '
                        f'{str(e).splitlines()[0]}') from None
  return config, spec


def cost_context(config: SearchConfig) -> cost_models.CostContext:
  """The context the search scored architectures in (as runner/search do)."""
  return cost_models.CostContext(
      space_name=config.cost_model_space or config.search_space,
      image_size=config.image_size, num_classes=config.num_classes,
      input_channels=config.input_channels)


def estimated_costs(config: SearchConfig, model_spec: Any,
                    indices: Sequence[int]) -> Dict[str, float]:
  """Every applicable cost model's estimate for one architecture."""
  context = cost_context(config)
  return {name: float(cost_models.get(name).cost(model_spec, indices, context))
          for name in cost_models.applicable(context.space_name, model_spec)}


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
      if value.size == 1:
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
  """step -> checkpoint prefix of every checkpoint the dir still lists."""
  state = tf.train.get_checkpoint_state(model_dir)
  if state is None:
    return {}
  out = {}
  for prefix in state.all_model_checkpoint_paths:
    step = _checkpoint_step(prefix)
    if step is not None:
      out[step] = prefix
  return out


def _checkpoint_step(prefix: str) -> Optional[int]:
  """The global step saved in a checkpoint; None if it is gone."""
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError):
    return None  # Deleted by keep_checkpoint_max while we were looking.
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
  decisions = schema.decisions(spec)
  found, source, checkpoint, logits = _pick_logits(model_dir, decisions, step,
                                                   scalars)
  if logits is None:
    try:
      logits = controller.read_logit_values(checkpoint, decisions,
                                            controller.DEFAULT_SCOPE)
    except KeyError as e:
      raise AnalysisError(e.args[0]) from None
    except tf.errors.OpError as e:
      raise AnalysisError(f'cannot read checkpoint {checkpoint}: '
                          f'{e.message.splitlines()[0]}') from None
  indices = architecture.canonicalize(spec, controller.argmax_indices(logits))
  probabilities = controller.probabilities(logits)
  return Analysis(
      model_dir=model_dir, search_space=config.search_space, step=found,
      source=source, checkpoint=checkpoint, indices=indices,
      architecture=architecture.format_indices(indices),
      block_string=architecture.block_string(architecture.prune(spec,
                                                                indices)),
      costs=estimated_costs(config, spec, indices),
      decisions=[DecisionReport(d.index, d.path, d.tag_name,
                                [float(p) for p in probs], i)
                 for d, probs, i in zip(decisions, probabilities, indices)])


def _format_cost(value: float) -> str:
  """`92.56` for milliseconds, `6,409,440` for counts."""
  return f'{value:,.0f}' if abs(value) >= 1000 else f'{value:.4g}'


def format_text(result: Analysis) -> str:
  """A readable report: architecture, costs and the probability table."""
  where = result.checkpoint if result.source == CHECKPOINT else 'the events'
  lines = [f'Search of {result.search_space} in {result.model_dir} at step '
           f'{result.step} (logits from {where})',
           f'architecture  {result.architecture}',
           f'block string  {result.block_string}']
  for name, value in sorted(result.costs.items()):
    unit = cost_models.get(name).unit
    lines.append(f'{"cost/" + name:<22}{_format_cost(value)} {unit}')
  lines.append('')
  lines.append(f'{"index":>5}  {"tag":<20}{"choice":>6}  '
               f'{"probabilities":<44}path')
  for d in result.decisions:
    probs = ' '.join(f'{p:.3f}' for p in d.probabilities)
    lines.append(f'{d.index:>5}  {d.tag_name:<20}{d.choice:>6}  '
                 f'{probs:<44}{d.path}')
  return '\n'.join(lines)


def format_json(result: Analysis) -> str:
  return json.dumps(result.to_dict(), indent=2)


def format_csv(result: Analysis) -> str:
  """One header row and one row: the summary fields and `cost/<name>`.

  One row per search, so rows of several searches concatenate into a table;
  the per-decision probabilities are in the json format.
  """
  row = {k: v for k, v in result.to_dict().items()
         if k not in ('costs', 'decisions', 'indices')}
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=list(row), lineterminator='\n')
  writer.writeheader()
  writer.writerow(row)
  return out.getvalue()


FORMATTERS = {'text': format_text, 'json': format_json, 'csv': format_csv}


def probability_history(scalars: Dict[str, Series],
                        decision: schema.Decision
                        ) -> Tuple[List[int], np.ndarray]:
  """Steps and softmax probabilities [steps, num_choices] of one decision."""
  logged = logged_logits(scalars, [decision])
  steps = sorted(logged)
  probs = [controller.probabilities(logged[s])[0] for s in steps]
  return steps, np.array(probs).reshape(len(steps), decision.num_choices)


def plot_history(path: str, model_spec: Any, scalars: Dict[str, Series],
                 title: str = '') -> None:
  """Draws choice probabilities, estimated cost and reward over steps.

  One small panel per decision with more than one choice, then one panel
  each for `rlcontroller/estimated_cost` and `rlcontroller/reward`.

  Args:
    path: output image file (the format follows its extension, e.g. .png).
    model_spec: the searched spec.
    scalars: `read_scalars(model_dir)`.
    title: figure title.

  Raises:
    AnalysisError: if matplotlib is not installed.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')  # Files only: no display needed.
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise AnalysisError('plotting needs matplotlib: pip install '
                        '"tunas_search[plot]" (or matplotlib)') from None
  decisions = [d for d in schema.decisions(model_spec) if d.num_choices > 1]
  panels = len(decisions) + 2
  columns = min(8, panels)
  rows = -(-panels // columns)
  # Few ticks, no shared axes and no tight_layout: with ~70 panels their
  # matplotlib bookkeeping would otherwise dominate the run time.
  figure, axes = plt.subplots(rows, columns, squeeze=False,
                              figsize=(2.2 * columns, 1.6 * rows + 0.6))
  flat = list(axes.flat)
  widest = max(decisions, key=lambda d: d.num_choices, default=None)
  for ax, d in zip(flat, decisions):
    steps, probs = probability_history(scalars, d)
    for j in range(d.num_choices):
      # Colour j is choice j in every panel (one legend for the figure).
      ax.plot(steps, probs[:, j] if steps else [], color=f'C{j}', lw=1,
              label=f'choice {j}')
    ax.set_ylim(0, 1)
    ax.set_yticks([0, 0.5, 1])
    ax.set_title(d.tag_name, fontsize=7, pad=2)
    if d is widest:
      figure.legend(*ax.get_legend_handles_labels(), loc='upper right',
                    fontsize=7, ncol=d.num_choices)
  for ax, tag in zip(flat[len(decisions):], (COST_TAG, REWARD_TAG)):
    points = scalars.get(tag, [])
    ax.plot([s for s, _ in points], [v for _, v in points], color='k', lw=1)
    ax.set_title(tag if points else f'{tag} (not logged)', fontsize=7, pad=2)
  for ax in flat[:panels]:
    ax.tick_params(labelsize=6)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(3))
  for ax in flat[panels:]:
    ax.axis('off')
  figure.suptitle(title or 'choice probabilities over steps', x=0.01,
                  ha='left', fontsize=9)
  figure.subplots_adjust(left=0.03, right=0.99, bottom=0.03, top=1 - 0.6 / (
      1.6 * rows + 0.6), wspace=0.35, hspace=0.6)
  figure.savefig(path, dpi=72)
  plt.close(figure)
