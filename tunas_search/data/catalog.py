"""The dataset registry: names -> DataSource factories, plus 'tfds:NAME',
'folder:PATH' and 'tfrecord:PATTERN' for a user's own images."""

import functools
from typing import Callable, Optional, Sequence, Tuple

from tunas_search import registry
from tunas_search.data import base
from tunas_search.data import embedded
from tunas_search.data import folder
from tunas_search.data import tfds_datasets
from tunas_search.data import tfrecord

# A factory takes (data_dir, num_validation) and returns a DataSource.
SourceFactory = Callable[[Optional[str], Optional[int]], base.DataSource]

REGISTRY: registry.Registry[SourceFactory] = registry.Registry('dataset')
REGISTRY.register('embedded', embedded.EmbeddedSource)
REGISTRY.register('imagenet', tfds_datasets.imagenet)
REGISTRY.register(
    'imagenet1001',
    lambda data_dir, num_validation=None: tfds_datasets.imagenet(
        data_dir, num_validation, background_class=True))
REGISTRY.register('cifar10', tfds_datasets.cifar10)

DEFAULT_DATASET = 'embedded'
TFDS_PREFIX = 'tfds:'
# A user's images: a source is made once per process (it reads every file's
# header, or every training record).
USER_SOURCES = {folder.PREFIX: folder.FolderSource,
                tfrecord.PREFIX: tfrecord.TfrecordSource}
USER_DATASETS = "'folder:PATH' or 'tfrecord:PATTERN' for your own images"


@functools.lru_cache(maxsize=None)
def _user_source(dataset_name: str, num_validation: Optional[int]):
  prefix = dataset_name[:dataset_name.index(':') + 1]
  return USER_SOURCES[prefix](dataset_name, num_validation)


def is_user_dataset(dataset_name: str) -> bool:
  """Whether `dataset_name` is folder:PATH or tfrecord:PATTERN."""
  return dataset_name.startswith(tuple(USER_SOURCES))


def get_source(dataset_name: str, data_dir: Optional[str] = None,
               num_validation: Optional[int] = None) -> base.DataSource:
  """Returns the DataSource of a registered name or a prefixed one.

  Args:
    dataset_name: a name in REGISTRY, 'tfds:NAME' for any prepared TFDS
      image-classification dataset, 'folder:PATH' (data/folder.py) or
      'tfrecord:PATTERN' (data/tfrecord.py).
    data_dir: the TFDS data directory ('embedded': optional cache directory).
    num_validation: held-out validation examples carved from the official
      training set; None for the dataset's default.

  Returns:
    A DataSource; nothing is read yet, except the TFDS metadata for
    'tfds:NAME', every header of 'folder:PATH' and every training record of
    'tfrecord:PATTERN' (each made once per process).

  Raises:
    registry.UnknownNameError: for an unknown name, listing the valid ones.
    DataError: for bad arguments, or missing data for 'tfds:NAME'.
  """
  if dataset_name.startswith(TFDS_PREFIX) and len(dataset_name) > len(
      TFDS_PREFIX):
    return tfds_datasets.generic(dataset_name, data_dir, num_validation)
  if is_user_dataset(dataset_name):
    return _user_source(dataset_name, num_validation)
  try:
    factory = REGISTRY.get(dataset_name)
  except registry.UnknownNameError as e:
    raise registry.UnknownNameError(
        f"{e}; or 'tfds:NAME' for a TFDS image-classification dataset, or "
        f'{USER_DATASETS}') from None
  return factory(data_dir, num_validation)


def get_info(dataset_name: str, data_dir: Optional[str] = None,
             num_validation: Optional[int] = None) -> base.DatasetInfo:
  """The DatasetInfo of a dataset (see get_source for the arguments)."""
  return get_source(dataset_name, data_dir, num_validation).info


def check_available(dataset_name: str, data_dir: Optional[str] = None,
                    num_validation: Optional[int] = None) -> None:
  """Checks that a dataset can be read, before anything is written.

  CLIs call this before creating the model directory so that a wrong
  data_dir fails in a second with one clear line.

  Raises:
    registry.UnknownNameError: for an unknown dataset name.
    DataError: naming the dataset and the path, if the data is missing.
  """
  get_source(dataset_name, data_dir, num_validation).check_available()


def check_splits(dataset_name: str, data_dir: Optional[str],
                 splits: Sequence[str],
                 num_validation: Optional[int] = None) -> None:
  """Checks that a dataset has every split a run will read, before the run
  writes or trains anything (`DataSource.check_split`).

  Raises:
    registry.UnknownNameError: for an unknown dataset name.
    DataError: naming the first missing split and the splits there are.
  """
  source = get_source(dataset_name, data_dir, num_validation)
  for split in splits:
    source.check_split(split)


def find_unreadable(dataset_name: str, num_validation: Optional[int] = None
                    ) -> Optional[Tuple[str, str]]:
  """The first image of a user's dataset TensorFlow cannot decode.

  For a reading error met while streaming, whose message does not say which
  image: reads the dataset's images in order until the bad one.

  Returns:
    (the file, or 'FILE record N', and the reason), or None for other
    datasets and when every image decodes.
  """
  if not is_user_dataset(dataset_name):
    return None
  return _user_source(dataset_name, num_validation).find_unreadable()
