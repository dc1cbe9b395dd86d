"""The one typed, validated configuration of a job, and its config.json.

`fields`: the config classes (`SearchConfig`, and the fields every training
job shares) with their command-line help; `validation`: what makes a value
valid; `persistence`: config.json and model_spec.json in the model dir;
`plan`: a search step's form, every `auto` resolved (`plan.resolve`). The
names below are the package's public face.
"""

from tunas_search.config.fields import CHOICES
from tunas_search.config.fields import HELP
from tunas_search.config.fields import JobConfigMixin
from tunas_search.config.fields import JobFields
from tunas_search.config.fields import option
from tunas_search.config.fields import RESUMABLE_FIELDS
from tunas_search.config.fields import RUNTIME_FIELDS
from tunas_search.config.fields import SearchConfig
from tunas_search.config.fields import TrainingFields
from tunas_search.config.persistence import CONFIG_FILENAME
from tunas_search.config.persistence import load_existing
from tunas_search.config.persistence import MODEL_SPEC_FILENAME
from tunas_search.config.persistence import OtherJobError
from tunas_search.config.persistence import check_resume
from tunas_search.config.persistence import write_or_check
from tunas_search.config.validation import check
from tunas_search.config.validation import check_cost_model_file
from tunas_search.config.validation import check_image_size
from tunas_search.config.validation import check_seed
from tunas_search.config.validation import ConfigError
from tunas_search.config.validation import CONTROLLER_PLACEMENTS
from tunas_search.config.validation import MAX_IMAGE_SIZE
from tunas_search.config.validation import MAX_SEED
from tunas_search.config.validation import MIN_IMAGE_SIZE
from tunas_search.config.validation import SUPERNET_WIDTHS
from tunas_search.config.validation import UNUSED_WEIGHT_STEPS
from tunas_search.config.validation import validate_training
from tunas_search.config.validation import VALIDATION_WEIGHTS

__all__ = [
    'CHOICES', 'CONFIG_FILENAME', 'CONTROLLER_PLACEMENTS', 'ConfigError',
    'HELP', 'JobConfigMixin', 'JobFields', 'MAX_IMAGE_SIZE', 'MAX_SEED',
    'MIN_IMAGE_SIZE', 'MODEL_SPEC_FILENAME', 'OtherJobError',
    'RESUMABLE_FIELDS', 'RUNTIME_FIELDS', 'SUPERNET_WIDTHS', 'SearchConfig',
    'TrainingFields', 'UNUSED_WEIGHT_STEPS', 'VALIDATION_WEIGHTS', 'check',
    'check_cost_model_file', 'check_resume', 'check_image_size', 'check_seed',
    'load_existing', 'option', 'validate_training',
    'write_or_check',
]
