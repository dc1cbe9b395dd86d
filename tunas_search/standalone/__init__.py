"""Stand-alone training, evaluation and warm-starting of one architecture."""

from tunas_search.config.standalone import MODES
from tunas_search.config.standalone import TrainEvalConfig
from tunas_search.standalone.model_fn import make_model_fn
from tunas_search.standalone.warm_start import SearchWeights
from tunas_search.standalone.warm_start import WarmStartError

__all__ = ['MODES', 'TrainEvalConfig', 'make_model_fn', 'SearchWeights',
           'WarmStartError']
