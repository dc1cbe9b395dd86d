"""The one typed, validated configuration of an export's TFLite models.

`bin/export_model.py` turns its flags into an `ExportOptions` (which models
to write, how to quantize, how to check them) and passes it to
`standalone.export.export_run`. The quantization modes are TensorFlow
Lite's post-training ones (its "Post-training quantization" guide); the
latency calibration (`cost_models/calibration.py`) times models quantized
the same way.
"""

import dataclasses
from typing import Optional

from tunas_search.config.fields import option
from tunas_search.config.validation import check
from tunas_search.config.validation import check_seed

# none: float32; float16: float16 weights; dynamic: int8 weights, float
# activations (dynamic range); int8: full integer, int8 weights and
# activations with ranges from a representative dataset.
QUANTIZE_MODES = ('none', 'float16', 'dynamic', 'int8')
# The precision a mode's model computes in: what a latency model, an
# export's accuracy report and its files name.
PRECISIONS = {'none': 'float32', 'float16': 'float16', 'dynamic': 'dynamic',
              'int8': 'int8'}
# Images of the training split whose activations fix an int8 model's ranges:
# TensorFlow Lite's guide asks for "around 100-500 samples"; 300 is inside.
DEFAULT_CALIBRATION_IMAGES = 300
# Top-1 points a quantized model may lose before the export warns. Ours, a
# threshold rather than a measurement: TensorFlow Lite's post-training
# guide presents full-integer quantization as costing little accuracy, so a
# drop of more than a point is worth a look (e.g. activations with outlier
# ranges).
DEFAULT_MAX_TOP1_DROP = 1.0


def check_quantize(quantize: str) -> None:
  """Raises ConfigError naming a `quantize` value and the valid ones."""
  check(quantize in QUANTIZE_MODES, f'unknown quantize {quantize!r}; valid '
        f'choices: {", ".join(QUANTIZE_MODES)}')


@dataclasses.dataclass(frozen=True)
class ExportOptions:
  """The TFLite models an export writes and how they are checked."""
  tflite: bool = option(True, 'Write the float TFLite model (and the '
                        'quantized one, with --quantize).')
  quantize: str = option(
      'none', 'Also write a post-training quantized TFLite model: none, '
      'float16 (float16 weights), dynamic (int8 weights) or int8 (full '
      "integer, activation ranges from the run's training split).",
      choices=QUANTIZE_MODES)
  int8_io: bool = option(False, 'quantize=int8: int8 input and output '
                         'tensors (default float32, quantized inside).')
  calibration_images: int = option(
      DEFAULT_CALIBRATION_IMAGES, 'quantize=int8: training images (drawn '
      'with --calibration_seed) that fix the activation ranges.')
  calibration_seed: int = option(0, 'Seed of the draw of calibration images.')
  evaluate: bool = option(
      True, "Evaluate every TFLite model written on the run's evaluation "
      'split (batch 1, through the interpreter) and record top-1/top-5.')
  data_dir: Optional[str] = option(
      None, "Where the run's dataset is, for --evaluate and int8 calibration "
      "(default: the run's data_dir).")
  max_top1_drop: float = option(
      DEFAULT_MAX_TOP1_DROP, 'Warn when the quantized model is this many '
      'top-1 points below the float one.')

  def __post_init__(self):
    check_quantize(self.quantize)
    check(self.tflite or self.quantize == 'none',
          f'quantize={self.quantize} writes a TFLite model; drop --notflite')
    check(not self.int8_io or self.quantize == 'int8',
          f'int8_io needs quantize=int8, got quantize={self.quantize}')
    check(self.calibration_images > 0, 'calibration_images must be positive, '
          f'got {self.calibration_images}')
    check_seed(self.calibration_seed)
    check(self.max_top1_drop >= 0.0,
          f'max_top1_drop must be >= 0, got {self.max_top1_drop}')

  @property
  def precision(self) -> str:
    """What the quantized model computes in ('float32' for none)."""
    return PRECISIONS[self.quantize]
