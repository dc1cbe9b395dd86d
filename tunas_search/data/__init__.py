"""Input pipelines: the dataset registry, SearchInputFn and ClassifierInputFn.

Registered datasets (REGISTRY.names()): 'embedded' (the default, shipped
Fashion-MNIST subset), 'imagenet', 'imagenet1001' (TuNAS's 1001 classes with
a background class), 'cifar10'; plus 'tfds:NAME' for any prepared TFDS
image-classification dataset, 'folder:PATH' for a folder of PNG/JPEG images
with one subfolder per class and 'tfrecord:PATTERN' for TFRecords of
tf.train.Examples (`image/encoded`, `image/class/label`). TFDS data is only
read from a user-given data_dir, never downloaded.
"""

from tunas_search.data.base import DataError
from tunas_search.data.base import DatasetInfo
from tunas_search.data.base import DataSource
from tunas_search.data.base import MAX_IMAGE_SIZE
from tunas_search.data.base import MIN_IMAGE_SIZE
from tunas_search.data.base import SPLITS
from tunas_search.data.base import validate_image_size
from tunas_search.data.catalog import check_available
from tunas_search.data.catalog import check_splits
from tunas_search.data.catalog import DEFAULT_DATASET
from tunas_search.data.catalog import find_unreadable
from tunas_search.data.catalog import get_info
from tunas_search.data.catalog import get_source
from tunas_search.data.catalog import is_user_dataset
from tunas_search.data.catalog import REGISTRY
from tunas_search.data.embedded import load_embedded
from tunas_search.data.input_fns import ClassifierInputFn
from tunas_search.data.input_fns import SearchInputFn
from tunas_search.data.preprocessing import transpose_images
from tunas_search.data.preprocessing import untranspose_images

__all__ = [
    'DataError', 'DatasetInfo', 'DataSource', 'MAX_IMAGE_SIZE',
    'MIN_IMAGE_SIZE', 'SPLITS', 'validate_image_size', 'check_available',
    'check_splits',
    'DEFAULT_DATASET', 'find_unreadable', 'get_info', 'get_source',
    'is_user_dataset', 'REGISTRY', 'load_embedded',
    'ClassifierInputFn', 'SearchInputFn', 'transpose_images',
    'untranspose_images',
]
