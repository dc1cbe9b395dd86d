"""Renders what a search prefers (an `analysis.Analysis`) for people and tools.

`analysis` reads a search's model dir; this module only formats the result:
the text, JSON and CSV reports and the probability plot of
`bin/analyze_search.py`, and the short summary `bin/search.py` prints when a
search ends.
"""

import csv
import io
from typing import Any, Callable, Dict

from tunas_search.results import analysis
from tunas_search.results import selection
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.results.analysis import Analysis

FORMATS = ('text', 'json', 'csv')


def format_text(result: Analysis) -> str:
  """A readable report: the argmax architecture (TuNAS's rule), its costs and
  the probability table."""
  where = (result.checkpoint if result.source == analysis.CHECKPOINT
           else 'the events')
  lines = [f'Search of {result.search_space} in {result.model_dir} at step '
           f'{result.step} (logits from {where})',
           f'argmax        {result.architecture}',
           f'block string  {result.block_string}']
  for name, value in sorted(result.costs.items()):
    unit = cost_models.get(name).unit
    lines.append(f'{"cost/" + name:<22}{selection.format_cost(value)} {unit}')
  if result.latency_precision:
    lines.append(f'{"latency model":<22}{result.latency_precision} '
                 '(what cost/measured estimates)')
  lines.append('')
  lines.append(f'{"index":>5}  {"tag":<20}{"choice":>6}  '
               f'{"probabilities":<44}path')
  for d in result.decisions:
    probs = ' '.join(f'{p:.3f}' for p in d.probabilities)
    lines.append(f'{d.index:>5}  {d.tag_name:<20}{d.choice:>6}  '
                 f'{probs:<44}{d.path}')
  return '\n'.join(lines)


def format_json(result: Analysis) -> str:
  """`result.to_dict()` as indented JSON (what search_result.json holds)."""
  return result.to_json()


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


FORMATTERS: Dict[str, Callable[[Analysis], str]] = {
    'text': format_text, 'json': format_json, 'csv': format_csv}


def format_summary(result: Analysis, details_path: str) -> str:
  """The few lines a finished search prints: result, files, what next.

  Args:
    result: the analysis of the finished search.
    details_path: where the full result was written (search_result.json).
  """
  costs = ', '.join(f'{k}={v:.4g}' for k, v in sorted(result.costs.items()))
  if result.latency_precision:
    costs += f' (measured: {result.latency_precision} latency model)'
  return '\n'.join([
      f'Search at step {result.step} in {result.model_dir}',
      f'  argmax:       {result.architecture}',
      f'  blocks:       {result.block_string}',
      f'  costs:        {costs}',
      f'  details:      {details_path}',
      f'  inspect:      tensorboard --logdir={result.model_dir}',
      f'  next:         bin/analyze_search.py --model_dir={result.model_dir}',
  ])


def plot_history(path: str, model_spec: Any,
                 scalars: Dict[str, analysis.Series],
                 title: str = '') -> None:
  """Draws choice probabilities, estimated cost and reward over steps.

  One small panel per decision with more than one choice, then one panel
  each for `rlcontroller/estimated_cost` and `rlcontroller/reward`.

  Args:
    path: output image file (the format follows its extension, e.g. .png).
    model_spec: the searched spec.
    scalars: `analysis.read_scalars(model_dir)`.
    title: figure title.

  Raises:
    AnalysisError: if matplotlib is not installed.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')  # Files only: no display needed.
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise analysis.AnalysisError('plotting needs matplotlib: pip install '
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
    steps, probs = analysis.probability_history(scalars, d)
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
  for ax, tag in zip(flat[len(decisions):], (analysis.COST_TAG, analysis.REWARD_TAG)):
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
