"""--search_space and --dataset values of every tool, as one-line errors.

A search space is a shipped name, an installed package's entry point or
MODULE:FUNCTION (search_spaces.get); a dataset is a registered name,
tfds:NAME, folder:PATH or tfrecord:PATTERN (tunas_search.data). Every bin/
tool resolves them here, so they all accept the same values and fail the same
way: one line naming the bad value, exit code 2.
"""

import contextlib
from typing import Any, Iterator, Optional

import search_spaces
from search_spaces import SearchSpaceError
from search_spaces import SpecError
from . import cli
from tunas_search.space import architecture
from tunas_search import config as config_lib
from tunas_search import cost_models
from tunas_search.registry import UnknownNameError

# What a tool's --help says after the list of names.
USER_SPACES = 'or MODULE:FUNCTION for a space in your own code'


def space_help(prefix: str, reference_nets: bool = True) -> str:
  """`prefix` followed by the valid names, for a --search_space help text."""
  names = (search_spaces.names() if reference_nets
           else search_spaces.search_space_names())
  return f'{prefix}: {", ".join(names)}, {USER_SPACES}.'


def search_space(name: Optional[str], *, searchable: bool = False,
                 image_size: Optional[int] = None
                 ) -> search_spaces.SearchSpace:
  """The SearchSpace a --search_space value names.

  Args:
    name: the flag's value.
    searchable: refuse reference nets (a search or a random sample).
    image_size: check it against the valid range (`check_image_size`) and
      a user's strides against it.

  Returns:
    The space.

  Raises:
    cli.UsageError: unknown or missing name (listing the names this tool
      takes), an image size out of range, a user's space that cannot be
      loaded or fails validation (naming the path in the spec), or a
      reference net where a space is needed.
  """
  valid = (search_spaces.search_space_names() if searchable
           else search_spaces.names())
  if not name:
    raise cli.UsageError('--search_space is required; valid choices: '
                         f'{", ".join(valid)}, {USER_SPACES}')
  if image_size is not None:
    check_image_size(image_size)
  try:
    space = search_spaces.get(name)
    if image_size is not None:
      search_spaces.check_image_size(space, image_size)
  except UnknownNameError as e:
    if not searchable:
      raise cli.UsageError(str(e)) from None
    # search_spaces.get lists the reference nets too, which this tool
    # refuses.
    raise cli.UsageError(f'unknown search space {name!r}; valid choices: '
                         f'{", ".join(valid)}, {USER_SPACES}') from None
  except (SearchSpaceError, SpecError) as e:
    raise cli.UsageError(f'--search_space={e}') from None
  if searchable and space.is_reference:
    raise cli.UsageError(
        f'{name!r} is a reference architecture, not a search space; train '
        'it with bin/train_eval.py. Search spaces: ' + ', '.join(valid))
  return space


def check_image_size(image_size: int) -> None:
  """Raises a UsageError for an image size outside the configs' range.

  The one rule of every tool (`config.check_image_size`), whether or not
  the tool builds a config.
  """
  try:
    config_lib.check_image_size(image_size)
  except config_lib.ConfigError as e:
    raise cli.UsageError(str(e)) from None


def check_cost_model(cost_model: str, space: search_spaces.SearchSpace,
                     context: Optional['cost_models.CostContext'] = None,
                     allow_none: bool = True) -> None:
  """Raises a UsageError unless `cost_model` can score `space`.

  Args:
    cost_model: a registered cost model, or cost_models.NONE.
    space: the space.
    context: where costs are scored (default: `space.scored_as`).
    allow_none: whether the tool takes cost_models.NONE (a search does, a
      cost window does not); the errors list it only then.
  """
  extra = [cost_models.NONE] if allow_none else []
  if allow_none and cost_model == cost_models.NONE:
    return
  model = cli.get_or_usage(cost_models.get, cost_model, extra=extra)
  space_name = context.space_name if context else space.scored_as
  spec = space.spec()
  if model.applies(space_name, spec):
    return
  others = ', '.join([*cost_models.applicable(space_name, spec), *extra])
  why = ''
  if cost_model == search_spaces.PIXEL1_LATENCY:
    pixel1 = sorted({s.pixel1_model for _, s in search_spaces.REGISTRY.items()
                     if s.pixel1_model})
    why = (': the Pixel-1 latency model is a linear model fitted to the '
           'features of the three TuNAS spaces only (' + ', '.join(pixel1) +
           ')')
  raise cli.UsageError(f'cost model {cost_model!r} does not apply to '
                       f'{space.name}{why}; use --cost_model={others}')


def largest_cost(space: search_spaces.SearchSpace, cost_model: str,
                 info: Any, image_size: int) -> str:
  """Says what the largest network of `space` costs, to help pick a target.

  Args:
    space: the space.
    cost_model: a registered cost model that applies to it.
    info: the dataset's DatasetInfo (classes, channels).
    image_size: the input side.
  """
  model = cost_models.get(cost_model)
  context = cost_models.CostContext(
      space.scored_as, image_size=image_size,
      num_classes=info.num_classes, input_channels=info.channels)
  spec = space.spec()
  largest = model.cost(spec, architecture.largest(spec), context)
  return (f'its largest network costs {largest:.4g} at {image_size}x'
          f'{image_size}')


DATASET_HELP = ('tfds:NAME for another TFDS dataset, folder:PATH for a '
                'folder of PNG/JPEG images with one subfolder per class, or '
                'tfrecord:PATTERN for TFRecords with image/encoded and '
                'image/class/label')


@contextlib.contextmanager
def reading_images(dataset: str) -> Iterator[None]:
  """Names the image behind a decoding error met while streaming `dataset`.

  TensorFlow's error says only that some image could not be decoded; for a
  user's folder or TFRecords the images are then read in order to find it,
  and the error becomes one line naming it (exit code 2).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from tunas_search import data
  # pylint: enable=g-import-not-at-top
  try:
    yield
  except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
    found = data.find_unreadable(dataset)
    if found is None:
      raise
    raise cli.UsageError(f'unreadable image {found[0]}: {found[1]}') from None


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
  """Turns a search-space error raised inside into a UsageError."""
  try:
    yield
  except UnknownNameError as e:
    raise cli.UsageError(str(e)) from None
  except (SearchSpaceError, SpecError) as e:
    raise cli.UsageError(f'--search_space={e}') from None
