"""A job's config in its model dir: config.json and model_spec.json.

Written atomically at start, read back and checked for compatibility when a
run resumes. The functions take any job config class with the methods they
name (a search's `SearchConfig`, train/eval's `TrainEvalConfig`).
"""

import dataclasses
import os
from typing import Any, Optional

from absl import logging

from tunas_search.config.validation import ConfigError

CONFIG_FILENAME = 'config.json'
MODEL_SPEC_FILENAME = 'model_spec.json'


class OtherJobError(ConfigError):
  """A config.json written by another kind of job than the one expected.

  Attributes:
    found: what the file holds ('train_eval run').
    expected: what was expected ('search').
    hint: what to do instead, appended to the message ('' for none).
  """

  def __init__(self, found: str, expected: str, hint: str = ''):
    super().__init__(f'{CONFIG_FILENAME} holds a {found}, not a {expected}'
                     + (f' ({hint})' if hint else ''))
    self.found = found
    self.expected = expected
    self.hint = hint

  def of(self, model_dir: str) -> str:
    """The message for `model_dir`, the dir holding the file."""
    return (f'{model_dir} holds a {self.found}, not a {self.expected}'
            + (f' ({self.hint})' if self.hint else ''))


def write_atomically(path: str, text: str) -> None:
  """Writes `path` through a temporary file, so it is whole or unchanged."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path + '.tmp', 'w') as f:
    f.write(text)
  tf.io.gfile.rename(path + '.tmp', path, overwrite=True)


def read_text(path: str) -> str:
  """The text of a local or gs:// file."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path) as f:
    return f.read()


def load_existing(cls, path: str):
  """The config a model dir holds, or one line saying why it cannot be read.

  Args:
    cls: the config class expected (SearchConfig or TrainEvalConfig).
    path: the model dir's config.json.

  Raises:
    ConfigError: for a config of another kind of job, a file that is not
      JSON, not an object, misses fields, has unknown or wrongly typed ones,
      or fails validation.
  """
  try:
    return cls.from_json(read_text(path))
  except OtherJobError as e:
    raise ConfigError(f'model dir {e.of(os.path.dirname(path))}; use '
                      'another --model_dir') from None
  except ConfigError as e:
    raise ConfigError(f'{path} cannot be used: {e}') from None
  except (ValueError, TypeError, AttributeError) as e:
    # json errors, missing fields (TypeError from the dataclass), a list
    # instead of an object (AttributeError), wrong types failing checks.
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise ConfigError(f'{path} is damaged or not a tunas_search config '
                      f'({reason}); restore it or use another --model_dir'
                      ) from None


def check_resume(config: Any, model_spec_json: str) -> Optional[Any]:
  """The config of the run the model dir holds, if `config` may resume it;
  None for a dir without one. Reads, never writes (`write_or_check` then
  writes).

  Raises:
    ConfigError: as `write_or_check`.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config_path = os.path.join(config.model_dir, CONFIG_FILENAME)
  if not tf.io.gfile.exists(config_path):
    return None
  old = load_existing(type(config), config_path)
  _check_resume(config, old,
                os.path.join(config.model_dir, MODEL_SPEC_FILENAME),
                model_spec_json)
  return old


def _check_resume(config: Any, old: Any, spec_path: str,
                  model_spec_json: str) -> None:
  """Raises ConfigError unless `config` may resume the run `old` started."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if old.search_space != config.search_space:
    raise ConfigError(
        f'model dir {config.model_dir} holds a search of '
        f'{old.search_space!r}, not {config.search_space!r}; use another '
        '--model_dir')
  diffs = config.incompatibilities(old)
  if diffs:
    listed = ', '.join(f'{k} (was {a!r}, now {b!r})'
                       for k, (a, b) in sorted(diffs.items()))
    raise ConfigError(f'model dir {config.model_dir} was written by an '
                      f'incompatible config: {listed}')
  if (tf.io.gfile.exists(spec_path) and
      read_text(spec_path) != model_spec_json):
    raise ConfigError(f'model dir {config.model_dir} holds a different '
                      'model spec (the search space definition changed)')


def write_or_check(config: Any, model_spec_json: str) -> bool:
  """Writes config.json and model_spec.json, or checks them on resume.

  On a resume that changes `config.resumable_fields` (a search's learning
  rates, RESUMABLE_FIELDS), config.json is rewritten atomically with the new
  values and a log line names each change.

  Args:
    config: this run's config: a SearchConfig, or any config class with the
      same `search_space`, `model_dir`, `to_json`, `from_json`,
      `incompatibilities` and `resumable_changes` (train_eval's
      TrainEvalConfig).
    model_spec_json: the serialised model spec of this run.

  Returns:
    True if the model dir already held a compatible run (a resume).

  Raises:
    ConfigError: if the model dir was written by a different search space,
      model spec or an incompatible config; nothing is written then.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config_path = os.path.join(config.model_dir, CONFIG_FILENAME)
  spec_path = os.path.join(config.model_dir, MODEL_SPEC_FILENAME)
  old = check_resume(config, model_spec_json)
  if old is not None:
    changes = config.resumable_changes(old)
    if changes:
      write_atomically(config_path, dataclasses.replace(
          old, **{k: new for k, (_, new) in changes.items()}).to_json())
      logging.info('Resuming %s with changed %s (config.json updated)',
                   config.model_dir, ', '.join(
                       f'{k} {a!r} -> {b!r}'
                       for k, (a, b) in changes.items()))
    return True
  tf.io.gfile.makedirs(config.model_dir)
  write_atomically(spec_path, model_spec_json)
  write_atomically(config_path, config.to_json())
  return False
