"""The dataset registry: names -> DataSource factories, plus 'tfds:NAME'."""

from typing import Callable, Optional

from tunas_search import registry
from tunas_search.data import base
from tunas_search.data import embedded
from tunas_search.data import tfds_datasets

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


def get_source(dataset_name: str, data_dir: Optional[str] = None,
               num_validation: Optional[int] = None) -> base.DataSource:
  """Returns the DataSource for a registered name or 'tfds:NAME'.

  Args:
    dataset_name: a name in REGISTRY, or 'tfds:NAME' for any prepared TFDS
      image-classification dataset.
    data_dir: the TFDS data directory ('embedded': optional cache directory).
    num_validation: held-out validation examples carved from the official
      training set; None for the dataset's default.

  Returns:
    A DataSource; nothing is read yet, except the TFDS metadata for
    'tfds:NAME'.

  Raises:
    registry.UnknownNameError: for an unknown name, listing the valid ones.
    DataError: for bad arguments, or missing data for 'tfds:NAME'.
  """
  if dataset_name.startswith(TFDS_PREFIX) and len(dataset_name) > len(
      TFDS_PREFIX):
    return tfds_datasets.generic(dataset_name, data_dir, num_validation)
  try:
    factory = REGISTRY.get(dataset_name)
  except registry.UnknownNameError as e:
    raise registry.UnknownNameError(
        f"{e}; or 'tfds:NAME' for a TFDS image-classification dataset"
    ) from None
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
