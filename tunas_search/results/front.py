"""A retarget's front: per cost target, its network, cost and one-shot accuracy.

For each target of a retarget (search/retarget.py) the front holds the final
architecture (the rule of a search's search_result.json, `selection.AUTO`),
its cost and its one-shot accuracy under the source search's shared weights
(the search's own validation pass, `evaluation.one_shot`); beside them the
source search's own final architecture and, for context, random
architectures of the space (drawn uniformly, `selection.sample`), scored the
same way on the same images. Written as front.json, front.csv and front.png
(one-shot accuracy against cost) in the retarget's model dir.
"""

import csv
import dataclasses
import io
import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from tunas_search import cost_models
from tunas_search.config import SearchConfig
from tunas_search.config import persistence
from tunas_search.config import plan as plan_lib
from tunas_search.controller import policy as controller
from tunas_search.evaluation import one_shot
from tunas_search.results import selection
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.search import retarget
from tunas_search.space import architecture
from tunas_search.space import schema

JSON_FILENAME = 'front.json'
CSV_FILENAME = 'front.csv'
PNG_FILENAME = 'front.png'
# Random architectures of the grey cloud, and the validation batches every
# point is scored on (the search's validation batch size each).
DEFAULT_NUM_RANDOM = 20
DEFAULT_NUM_BATCHES = 10
TARGET, SOURCE, RANDOM = 'target', 'source', 'random'


@dataclasses.dataclass(frozen=True)
class Point:
  """One network of the front.

  Attributes:
    kind: `target` (a retarget's result), `source` (the source search's
      final architecture) or `random`.
    target: its cost target (None for random ones).
    architecture: its architecture string.
    cost: its cost in the cost model's unit.
    one_shot_accuracy: top-1 accuracy in [0, 1] under the source's weights.
    in_window: whether `cost` lies in the target's window (None for random).
  """
  kind: str
  target: Optional[float]
  architecture: str
  cost: float
  one_shot_accuracy: float
  in_window: Optional[bool]


@dataclasses.dataclass(frozen=True)
class Front:
  """What front.json holds."""
  source_dir: str
  cost_model: str
  unit: str
  images_per_point: int
  points: List[Point]

  def of_kind(self, kind: str) -> List[Point]:
    return [p for p in self.points if p.kind == kind]

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def _choice(config: SearchConfig, spec: Any, logits, target: float
            ) -> selection.Choice:
  return selection.Distribution(
      spec, controller.probabilities(logits),
      cost_model=cost_models.get(config.cost_model),
      context=cost_models.context_for(config), target=target
  ).choose(selection.AUTO)


def _source_indices(source: retarget.Source) -> List[int]:
  """The source search's final architecture, as its search_result.json says."""
  result = json.loads(persistence.read_text(
      os.path.join(source.model_dir, retarget.RESULT_FILENAME)))
  chosen = result.get('final_architecture') or {}
  return list(chosen.get('indices') or architecture.parse_indices(
      result['architecture']))


def build(model_dir: str, config: SearchConfig, source: retarget.Source,
          targets: Sequence[float], *, num_random: int = DEFAULT_NUM_RANDOM,
          num_batches: Optional[int] = DEFAULT_NUM_BATCHES, seed: int = 0
          ) -> Front:
  """Scores a finished retarget's front.

  Args:
    model_dir: the retarget's model dir.
    config: its config (cost model and context of every cost).
    source: the search it retargeted.
    targets: its targets, in controller order.
    num_random: random architectures drawn uniformly (seeded by `seed`).
    num_batches: validation batches each point is scored on (None: all).
    seed: seed of the random architectures.
  """
  spec = source.spec
  decisions = schema.decisions(spec)
  model = cost_models.get(config.cost_model)
  context = cost_models.context_for(config)
  cost = lambda ix: float(model.cost(spec, ix, context))
  entries = []  # (kind, target, indices, in_window)
  for k, target in enumerate(targets):
    choice = _choice(config, spec, retarget.final_logits(
        model_dir, decisions, k), float(target))
    entries.append((TARGET, float(target), choice.indices, choice.in_window))
  source_target = source.config.rl_cost_model_target
  source_ix = architecture.canonicalize(spec, _source_indices(source))
  entries.append((SOURCE, source_target, source_ix, None))
  for ix in selection.sample(spec, selection.uniform(decisions), num_random,
                             seed):
    entries.append((RANDOM, None, ix, None))
  batch_size = one_shot.default_batch_size(source.config)
  net = one_shot.Supernet(source.model_dir, source.config,
                          plan_lib.previous(source.model_dir))
  points = []
  with one_shot.Scorer(spec, [net], batch_size=batch_size,
                       num_batches=num_batches) as scorer:
    for kind, target, ix, in_window in entries:
      points.append(Point(kind, target, architecture.format_indices(ix),
                          cost(ix), scorer.accuracies(ix)[0], in_window))
  return Front(os.path.abspath(source.model_dir), config.cost_model,
               model.unit, batch_size * (num_batches or 0), points)


def format_csv(front: Front) -> str:
  """One row per point: kind, target, cost, one-shot accuracy, architecture."""
  out = io.StringIO()
  fields = [f.name for f in dataclasses.fields(Point)]
  writer = csv.DictWriter(out, fieldnames=fields, lineterminator='\n')
  writer.writeheader()
  for point in front.points:
    writer.writerow(dataclasses.asdict(point))
  return out.getvalue()


def write(front: Front, model_dir: str) -> List[str]:
  """Writes front.json, front.csv and (with matplotlib) front.png atomically.

  Returns:
    The paths written.
  """
  paths = []
  for name, text in ((JSON_FILENAME, json.dumps(front.to_dict(), indent=2)),
                     (CSV_FILENAME, format_csv(front))):
    path = os.path.join(model_dir, name)
    model_dir_lib.write_text(path, text)
    paths.append(path)
  png = os.path.join(model_dir, PNG_FILENAME)
  if plot(front, png):
    paths.append(png)
  return paths


def plot(front: Front, path: str) -> bool:
  """One-shot accuracy against cost; False, drawing nothing, without
  matplotlib (the `plot` extra)."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  figure, axes = plt.subplots(figsize=(6, 4.5))
  cloud = front.of_kind(RANDOM)
  axes.scatter([p.cost for p in cloud], [p.one_shot_accuracy for p in cloud],
               c='0.7', s=14, label='random architectures')
  for p in front.of_kind(TARGET):
    axes.axvline(p.target, color='C0', lw=0.6, ls=':')
  found = front.of_kind(TARGET)
  axes.plot([p.cost for p in found], [p.one_shot_accuracy for p in found],
            'o-', color='C0', label='retargeted')
  for p in front.of_kind(SOURCE):
    axes.plot([p.cost], [p.one_shot_accuracy], '*', color='C3',
              markersize=14, label=f'source search (target {p.target:g})')
  axes.set_xlabel(f'cost ({front.cost_model}, {front.unit})')
  axes.set_ylabel('one-shot accuracy')
  axes.set_title(f'Retarget front of {os.path.basename(front.source_dir)}',
                 fontsize=9)
  axes.legend(fontsize=8)
  figure.tight_layout()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as local:
    drawn = os.path.join(local, PNG_FILENAME)
    figure.savefig(drawn, dpi=90)
    plt.close(figure)
    tf.io.gfile.copy(drawn, path + '.tmp', overwrite=True)
  tf.io.gfile.rename(path + '.tmp', path, overwrite=True)
  return True


def format_text(front: Front) -> str:
  """A short table of the targets' results, for the end of a run."""
  lines = [f'Retarget front ({front.cost_model}, {front.unit}):']
  for p in front.of_kind(TARGET) + front.of_kind(SOURCE):
    label = 'source' if p.kind == SOURCE else 'target'
    window = '' if p.in_window is None else (
        ' in window' if p.in_window else ' OUTSIDE window')
    lines.append(f'  {label} {p.target:g}: cost {p.cost:.4g}{window}, '
                 f'one-shot accuracy {p.one_shot_accuracy:.3f}  '
                 f'{p.architecture}')
  return '\n'.join(lines)
