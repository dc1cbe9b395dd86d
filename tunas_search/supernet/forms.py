"""The named forms `build_network` builds a network in.

A fixed architecture (numpy masks) is built stand-alone; a supernet (tensor
masks) in the form its step needs (docs/DESIGN.md, "Control flow"):

  standalone  stateful batch norm (moving averages), dropout and path
              dropout: stand-alone training, evaluation and export
  xla         every op choice a functional `If`, widths masked: a step XLA
              compiles (TPU; docs/xla.md)
  every_step  every op choice a v1 `tf.cond`, so an unselected choice's
              weights get zero gradients: TuNAS's every-step RMSProp
  deferred    no conds: an unselected choice is dead throughout, the
              gradients of its weights too (`tf_internals.dead_gradients`);
              every weight it reads is recorded in a `WeightUses`: the
              deferred update's training pass
  validation  no conds, no gradients: a supernet's forward pass only

The supernet forms use batch statistics in batch norm (docs/method.md
section 4); all but `xla` compute searched widths masked or at the sampled
width (`widths.WIDTH_FORMS`).
"""

import dataclasses

from tunas_search.supernet import ops
from tunas_search.supernet import widths

# How a searched op choice is built (`ops.switch`).
FUNCTIONAL = 'functional'  # Nested functional conds (v2 control flow).
CONDS = 'conds'  # A v1 cond per choice, between Switch/Merge routing.
DEAD = 'dead'  # The routing alone: no cond, dead when not selected.
CHOICE_BUILDS = (FUNCTIONAL, CONDS, DEAD)


@dataclasses.dataclass(frozen=True)
class Form:
  """How `build_network` builds: make one with the functions below.

  Attributes:
    name: the form's name (module docstring).
    is_training: dropout, path dropout and stateful BN updates.
    batch_norm_mode: 'batch' (always batch statistics) or 'stateful'
      (moving averages, updated in UPDATE_OPS when training).
    choices: how a searched op choice is built (CHOICE_BUILDS).
    sampled_widths: compute searched widths at their sampled size.
    records_uses: the build must be given a `WeightUses` (deferred).
    dropout_rate: dropout before the classifier (training only).
    path_dropout_rate: stochastic depth on residual branches (training
      only).
  """
  name: str
  is_training: bool
  batch_norm_mode: str
  choices: str
  sampled_widths: bool = False
  records_uses: bool = False
  dropout_rate: float = 0.0
  path_dropout_rate: float = 0.0

  def __post_init__(self):
    if self.batch_norm_mode not in ops.BATCH_NORM_MODES:
      raise ValueError(f'unknown batch_norm_mode {self.batch_norm_mode!r}; '
                       f'valid: {ops.BATCH_NORM_MODES}')
    if self.choices not in CHOICE_BUILDS:
      raise ValueError(f'unknown choices {self.choices!r}; valid: '
                       f'{CHOICE_BUILDS}')
    if not (0 <= self.dropout_rate < 1 and 0 <= self.path_dropout_rate < 1):
      raise ValueError('dropout rates must be in [0, 1)')


def _sampled(width_form: str) -> bool:
  if width_form not in widths.WIDTH_FORMS:
    raise ValueError(f'unknown width_form {width_form!r}; valid: '
                     f'{widths.WIDTH_FORMS}')
  return width_form == widths.SAMPLED


def standalone(is_training: bool, dropout_rate: float = 0.0,
               path_dropout_rate: float = 0.0,
               batch_norm_mode: str = 'stateful') -> Form:
  """A fixed architecture, trained or evaluated on its own.

  `batch_norm_mode='batch'` trains it as a search trains the supernet
  (batch statistics, no moving averages).
  """
  return Form('standalone', is_training, batch_norm_mode, CONDS,
              dropout_rate=dropout_rate, path_dropout_rate=path_dropout_rate)


def xla() -> Form:
  """A supernet step XLA compiles: functional conds, masked widths."""
  return Form('xla', True, 'batch', FUNCTIONAL)


def every_step(width_form: str) -> Form:
  """The training pass of TuNAS's every-step RMSProp (zero gradients)."""
  return Form('every_step', True, 'batch', CONDS, _sampled(width_form))


def deferred(width_form: str) -> Form:
  """The training pass of the deferred update (dead gradients)."""
  return Form('deferred', True, 'batch', DEAD, _sampled(width_form),
              records_uses=True)


def validation(width_form: str) -> Form:
  """A supernet's forward pass, no gradients taken through it."""
  return Form('validation', True, 'batch', DEAD, _sampled(width_form))


def named(name: str, width_form: str) -> Form:
  """The supernet form `name` at `width_form` widths, as a step plan names
  its passes (`StepPlan.training_form`, `StepPlan.validation_form`).

  Raises:
    ValueError: for a name that is not a supernet form.
  """
  makers = {'xla': lambda _: xla(), 'every_step': every_step,
            'deferred': deferred, 'validation': validation}
  if name not in makers:
    raise ValueError(f'unknown supernet form {name!r}; valid: '
                     f'{", ".join(makers)}')
  return makers[name](width_form)
