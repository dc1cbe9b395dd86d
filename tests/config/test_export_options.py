"""ExportOptions: defaults, the precision a mode names, one-line errors."""

import pytest

from tunas_search.config import ConfigError
from tunas_search.config import export


def test_defaults_and_precisions():
  options = export.ExportOptions()
  assert (options.tflite, options.quantize, options.evaluate) == (
      True, 'none', True)
  assert options.precision == 'float32'
  assert export.ExportOptions(quantize='int8').precision == 'int8'
  assert set(export.PRECISIONS) == set(export.QUANTIZE_MODES)


@pytest.mark.parametrize('values, message', [
    (dict(quantize='int4'), "unknown quantize 'int4'; valid choices: none, "
     'float16, dynamic, int8'),
    (dict(int8_io=True, quantize='float16'),
     'int8_io needs quantize=int8, got quantize=float16'),
    (dict(quantize='dynamic', tflite=False),
     'quantize=dynamic writes a TFLite model; drop --notflite'),
    (dict(calibration_images=-1),
     'calibration_images must be positive, got -1'),
    (dict(calibration_seed=-1), 'seed'),
    (dict(max_top1_drop=-0.5), 'max_top1_drop must be >= 0, got -0.5'),
])
def test_bad_values(values, message):
  with pytest.raises(ConfigError, match=message) as error:
    export.ExportOptions(**values)
  assert '\n' not in str(error.value)
