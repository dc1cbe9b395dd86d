"""TensorBoard for a search: choice names, probability tags, the chart layout.

A search logs every decision's logits under TuNAS's tag names
(`rlpathlogits/<path>/<j>`, `rltaglogits/<tag>_indices_<k>/<j>`) and, for
every decision with more than one choice, the choice probabilities as
`rlprobs/<path>/<choice name>` (docs/method.md section 6). The layout written
here for TensorBoard's Custom Scalars dashboard draws them as one chart per
decision with one line per choice, grouped by block, after a first section
with the estimated cost, the reward and the validation accuracy.
"""

import os
import re
import time
from typing import Any, List, Sequence

import tensorflow as tf
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary

from tunas_search.space import architecture
from tunas_search.controller import policy as controller
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.space import specs
from tunas_search.config import SearchConfig

PROBS_PREFIX = 'rlprobs'
# Scalar tags of the controller, under its scope as in TuNAS.
_RL = controller.DEFAULT_SCOPE
COST_TARGET_TAG = f'{_RL}/cost_target'
# A fixed name: a resumed search rewrites the same file instead of adding
# one, and the `0` timestamp sorts it before every events file the search
# writes, so TensorBoard reads the layout first.
LAYOUT_FILENAME = 'events.out.tfevents.0000000000.custom_scalars_layout'
SEARCH_CATEGORY = 'search: cost, reward, accuracy'
# (title, tags) of the charts of the first category; the cost chart only
# when the search has a cost model.
_COST_CHART = ('estimated cost vs target',
               (f'{_RL}/estimated_cost', COST_TARGET_TAG))
_SEARCH_CHARTS = (
    ('reward vs baseline', (f'{_RL}/reward', f'{_RL}/baseline')),
    ('validation accuracy', (f'{_RL}/validation_accuracy',)),
)
# Kinds of layer records that still hold decisions (their fields are not
# known yet, so only the kind names the choice), as in block strings.
_RECORD_KINDS = {specs.DepthwiseBottleneck: 'ib', specs.Conv: 'conv',
                 specs.SeparableConv: 'sep',
                 specs.UniversalInvertedBottleneck: 'uib'}


def _record_name(record: Any) -> str:
  """A block-string token for a layer record (`ib_k5_e6_relu`, `skip`)."""
  if isinstance(record, specs.Residual):
    return '+' + _record_name(record.layer)
  if schema.decisions(record):
    return _RECORD_KINDS.get(type(record), type(record).__name__.lower())
  try:
    return architecture.layer_token(record)
  except architecture.ArchitectureError:
    return type(record).__name__.lower()


def _value_name(decision: schema.Decision, choice: Any) -> str:
  """The name of one choice from its value alone (may repeat)."""
  if isinstance(choice, bool):  # Before int: bool is an int.
    return 'se' if choice else 'nose'
  if isinstance(choice, int):
    if decision.path.split('/')[-1].endswith('kernel_size'):
      # A UIB's kernel 0 is no depthwise conv (specs.NO_DEPTHWISE).
      return f'k{choice}' if choice else 'none'
    if decision.tag == schema.FILTERS:
      return f'w{choice}'
    return str(choice)
  if isinstance(choice, float):
    return f'{choice:g}'
  if isinstance(choice, str):
    return choice
  if isinstance(choice, specs.FilterMultiplier):
    return f'e{choice.scale:g}'
  if isinstance(choice, specs.Zero):
    return 'skip'
  return _record_name(choice)


def choice_names(decision: schema.Decision) -> List[str]:
  """A short name for each choice of `decision`, unique within it.

  `k3`/`k5` (kernel sizes), `e3`/`e6` (expansion multipliers), `w16` (widths),
  `skip`, `se`/`nose` (squeeze-excite) and block-string tokens for layers
  (`sep3_relu`, `ib`, ...). Names that repeat, or that hold a `/` (which would
  split a tag), give way to the choice indices `0`, `1`, ...
  """
  names = [_value_name(decision, c) for c in decision.oneof.choices]
  if len(set(names)) < len(names) or any('/' in n or not n for n in names):
    return [str(j) for j in range(decision.num_choices)]
  return names


def choice_name(decision: schema.Decision, j: int) -> str:
  """The name of choice `j` of `decision` (see `choice_names`)."""
  return choice_names(decision)[j]


def is_charted(decision: schema.Decision) -> bool:
  """Whether a decision gets probability tags and a chart: >1 choice."""
  return decision.num_choices > 1


def charted(decisions: Sequence[schema.Decision]) -> List[schema.Decision]:
  """The decisions that get probability tags and a chart (`is_charted`)."""
  return [d for d in decisions if is_charted(d)]


def _tag_path(decision: schema.Decision) -> str:
  return decision.path or 'root'  # As controller.legacy_variable_name.


def prob_tags(decision: schema.Decision) -> List[str]:
  """`rlprobs/<path>/<choice name>` for each choice of `decision`."""
  return [f'{PROBS_PREFIX}/{_tag_path(decision)}/{name}'
          for name in choice_names(decision)]


def prob_regex(decision: schema.Decision) -> str:
  """A regex matching exactly `prob_tags(decision)` among all search tags.

  Anchored, and `[^/]+` for the choice, so that a decision nested inside one
  of this decision's choices (whose path extends this one) never matches.
  """
  return f'^{re.escape(PROBS_PREFIX + "/" + _tag_path(decision))}/[^/]+$'


def chart_title(decision: schema.Decision) -> str:
  """E.g. `blocks/1/layers/0/kernel_size (op_indices_3)`."""
  return f'{_tag_path(decision)} ({decision.tag_name})'


def category_title(decision: schema.Decision) -> str:
  """The block a decision belongs to (`blocks/<b>`), else its first segment."""
  parts = _tag_path(decision).split('/')
  return '/'.join(parts[:2]) if parts[0] == 'blocks' else parts[0]


def _multiline(title: str, regex: str) -> layout_pb2.Chart:
  return layout_pb2.Chart(
      title=title, multiline=layout_pb2.MultilineChartContent(tag=[regex]))


def _exact(tags: Sequence[str]) -> str:
  return '^(' + '|'.join(re.escape(t) for t in tags) + ')$'


def layout(model_spec: Any, with_cost: bool) -> layout_pb2.Layout:
  """The Custom Scalars layout of a search of `model_spec`.

  Args:
    model_spec: the searched spec.
    with_cost: whether the search has a cost model (and logs its cost).

  Returns:
    A first category with the cost against its target (if `with_cost`), the
    reward against the baseline and the validation accuracy; then one
    category per block, in traversal order, with one multiline chart per
    decision of more than one choice.
  """
  charts = ([_COST_CHART] if with_cost else []) + list(_SEARCH_CHARTS)
  result = layout_pb2.Layout()
  result.category.add(title=SEARCH_CATEGORY,
                      chart=[_multiline(t, _exact(tags)) for t, tags in charts])
  by_title = {}
  for d in charted(schema.decisions(model_spec)):
    title = category_title(d)
    if title not in by_title:
      by_title[title] = result.category.add(title=title)
    by_title[title].chart.append(_multiline(chart_title(d), prob_regex(d)))
  return result


def write_layout(config: SearchConfig, model_spec: Any) -> str:
  """Writes the search's Custom Scalars layout into its model dir.

  Atomic (a temporary name, then a rename) and idempotent: a resumed search
  rewrites the same file.

  Returns:
    The path of the events file written.
  """
  summary = custom_scalar_summary.pb(
      layout(model_spec, with_cost=config.cost_model != cost_models.NONE))
  now = time.time()
  events = [tf.compat.v1.Event(wall_time=now, file_version='brain.Event:2'),
            tf.compat.v1.Event(wall_time=now, step=0, summary=summary)]
  path = os.path.join(config.model_dir, LAYOUT_FILENAME)
  # The temporary name lacks `tfevents`, so TensorBoard never reads it.
  temporary = os.path.join(config.model_dir, '.custom_scalars_layout.tmp')
  with tf.io.TFRecordWriter(temporary) as writer:
    for event in events:
      writer.write(event.SerializeToString())
  tf.io.gfile.rename(temporary, path, overwrite=True)
  return path
