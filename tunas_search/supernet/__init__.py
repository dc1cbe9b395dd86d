"""Masked layers and the spec -> network builder (supernet and stand-alone)."""

from tunas_search.supernet import forms
from tunas_search.supernet.builder import build_network
from tunas_search.supernet.deferred import DeferredRMSProp
from tunas_search.supernet.ops import reading_snapshots
from tunas_search.supernet.weights import MaskedWeightDecay
from tunas_search.supernet.weights import is_weight_decayed
from tunas_search.supernet.weights import regularization_loss
from tunas_search.supernet.weights import slice_to_shape
from tunas_search.supernet.weights import supernet_assignments
from tunas_search.supernet.weights import supernet_init_op
from tunas_search.supernet.weights import WeightUses

__all__ = [
    'DeferredRMSProp', 'MaskedWeightDecay', 'WeightUses', 'build_network',
    'forms', 'is_weight_decayed',
    'reading_snapshots', 'regularization_loss',
    'slice_to_shape', 'supernet_assignments', 'supernet_init_op',
]
