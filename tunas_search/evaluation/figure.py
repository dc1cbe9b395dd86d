"""The figure of a search evaluation (`report.build`'s dict), with its verdict.

Left: stand-alone test accuracy against cost, each candidate's value as
compared (the mean of its finished seeds), its error bar the seed noise of
such a mean (the two-way residual over sqrt(k)), not the spread of two
runs; the target window shaded. Right: one-shot against stand-alone test
accuracy. Title: the verdict of each rule on the test split.
"""

import os
import tempfile
from typing import Any, Dict, Optional

from tunas_search.evaluation import candidates as candidates_lib
from tunas_search.evaluation import report

_STYLE = {candidates_lib.RANDOM: ('o', 'C0', 'random (target window)'),
          candidates_lib.OWN_COST: ('s', 'C2', "random (a search's cost)"),
          candidates_lib.EXTRA: ('D', 'C4', 'extra'),
          candidates_lib.REFERENCE: ('P', 'C1', 'reference'),
          candidates_lib.SEARCHED: ('*', 'C3', 'searched')}


def plot(path: str, built: Dict[str, Any],
         temporary: Optional[str] = None) -> bool:
  """Draws the figure to `path` (PNG) through `temporary` (default
  `path.tmp`); False, drawing nothing, without matplotlib (the `plot`
  extra)."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  figure, (left, right) = plt.subplots(1, 2, figsize=(11, 5))
  _plot_cost(left, built)
  _plot_one_shot(right, built)
  figure.suptitle('\n'.join(_wrap(line) for line in report.headline(built)),
                  fontsize=8)
  figure.tight_layout()
  # Drawn locally, then moved into place whole (the path may be gs://).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as local:
    drawn = os.path.join(local, report.FIGURE_FILENAME)
    figure.savefig(drawn, dpi=90)
    plt.close(figure)
    temporary = temporary or path + '.tmp'
    tf.io.gfile.copy(drawn, temporary, overwrite=True)
  tf.io.gfile.rename(temporary, path, overwrite=True)
  return True


def _wrap(text: str, width: int = 150) -> str:
  words, lines, line = text.split(), [], ''
  for w in words:
    if line and len(line) + len(w) + 1 > width:
      lines.append(line)
      line = w
    else:
      line = f'{line} {w}'.strip()
  return '\n'.join(lines + [line])


def _points(built: Dict[str, Any], kind: str):
  return [e for e in built['candidates'] if e['kind'] == kind
          and e['compared'][report.HEADLINE] is not None
          and e['cost'] is not None]


def _plot_cost(ax, built: Dict[str, Any]) -> None:
  noise = built['noise']
  k = max(1, noise['seeds_compared'])
  seed_std = noise[report.HEADLINE]['seed_std']
  error = None if seed_std is None else 100 * seed_std / k ** 0.5
  for kind, (marker, colour, label) in _STYLE.items():
    points = _points(built, kind)
    if not points:
      continue
    ax.errorbar([e['cost'] for e in points],
                [100 * e['compared'][report.HEADLINE] for e in points],
                yerr=error, fmt=marker, color=colour, label=label,
                markersize=14 if kind == candidates_lib.SEARCHED else 6)
    if kind in (candidates_lib.SEARCHED, candidates_lib.REFERENCE):
      for e in points:
        ax.annotate(e['id'].replace('searched-', ''),
                    (e['cost'], 100 * e['compared'][report.HEADLINE]),
                    fontsize=7, xytext=(4, 4), textcoords='offset points')
  if built['window'] is not None:
    ax.axvspan(*built['window'], color='0.9', zorder=0)
  ax.set_xlabel(f'cost ({built["cost_model"]}, {built["unit"]})')
  ax.set_ylabel('stand-alone top-1, test (%)')
  ax.legend(fontsize=7)
  ax.set_title(f'stand-alone test accuracy vs cost (mean of {k} seeds; '
               'bars: seed noise of such a mean)', fontsize=8)


def _plot_one_shot(ax, built: Dict[str, Any]) -> None:
  for c in built['one_shot_vs_standalone']:
    if c['split'] != report.HEADLINE:
      continue
    index = c['search']
    points = [e for e in built['candidates'] if e['one_shot'] is not None
              and e['compared'][report.HEADLINE] is not None]
    tau = '-' if c['kendall_tau'] is None else f'{c["kendall_tau"]:.2f}'
    ax.scatter([100 * e['one_shot'][index] for e in points],
               [100 * e['compared'][report.HEADLINE] for e in points], s=14,
               color=f'C{index}', label=f'supernet {index} (tau {tau})')
  ax.set_xlabel('one-shot top-1 with inherited weights, validation (%)')
  ax.set_ylabel('stand-alone top-1, test (%)')
  ax.legend(fontsize=7)
  ax.set_title('one-shot vs stand-alone accuracy', fontsize=9)
