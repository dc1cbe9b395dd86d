"""Command-line flags derived from a config dataclass: each default lives once.

A `ConfigFlags` makes one absl flag per field of a config class (SearchConfig,
TrainEvalConfig): the field's name, its type (int, float, bool, str, or
Optional of one), its default and the help text of its `config.option`
metadata. A field whose metadata lists `choices`, or whose values are a
registry's names, becomes an enum flag. Fields that are no flag of their own
are named explicitly (`not_flags`): derived by the CLI (from the dataset or
the search space), or defined by the CLI by hand because their flag behaves
differently (an alias, an `auto` value, a default taken from elsewhere).
"""

import dataclasses
import typing
from typing import Any, Callable, Collection, Dict, Mapping, Optional, Sequence

from absl import flags

# pylint: disable=g-bad-import-order
# cli first: it quiets TensorFlow's start-up before anything can import it.
from . import cli
from tunas_search import config as config_lib
# pylint: enable=g-bad-import-order

# The flags this module defines belong to the tool that asks for them: they
# are listed under its name by --helpfull and shown by its --help.
flags.disclaim_key_flags()

# A Cloud TPU v2-8/v3-8 has 8 cores; CPU and GPU runs use one replica.
DEFAULT_TPU_REPLICAS = 8

_DEFINE_BY_TYPE: Dict[type, Callable[..., Any]] = {
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    bool: flags.DEFINE_bool,
    str: flags.DEFINE_string,
}


@dataclasses.dataclass(frozen=True)
class RegistryNames:
  """The valid values of a field that names an entry of a registry.

  Attributes:
    noun: what the registry calls an entry ('reward function'), for errors.
    names: the valid values: the registry's names (and any extra value the
      field allows, such as 'none').
  """
  noun: str
  names: Sequence[str]


class _NameParser(flags.EnumParser):
  """An enum parser whose error reads like a registry's (`registry.get`)."""

  def __init__(self, noun: str, names: Sequence[str]):
    super().__init__(names)
    self.noun = noun

  def parse(self, argument: str) -> str:
    if argument not in self.enum_values:
      raise ValueError(f'unknown {self.noun} {argument!r}; valid choices: '
                       f'{", ".join(self.enum_values)}')
    return argument


class _NameFlag(flags.EnumFlag):
  """An enum flag of registry names: `--help` lists them as <a|b|c>."""

  def __init__(self, name: str, default: str, help_text: str,
               names: RegistryNames):
    super().__init__(name, default, help_text, names.names)
    self.parser = _NameParser(names.noun, names.names)


def _flag_type(hint: Any) -> type:
  """int, float, bool or str for a field's type hint, Optional or not."""
  if typing.get_origin(hint) is typing.Union:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1:
      hint = args[0]
  if hint not in _DEFINE_BY_TYPE:
    raise TypeError(f'no flag type for {hint!r}')
  return hint


class ConfigFlags:
  """The flags of one config class: one per field, except `not_flags`.

  Define them with `define`, read them back with `values` and build the
  config from those and the CLI's derived values:
  `Config(**config_flags.values(FLAGS), **derived)`.
  """

  def __init__(self, config_class: type, not_flags: Collection[str],
               registry_names: Optional[Mapping[str, RegistryNames]] = None):
    """Checks the split of `config_class`'s fields into flags and not.

    Args:
      config_class: a dataclass whose flag fields are `config.option`s.
      not_flags: the fields that are no generated flag (derived by the CLI,
        or given a flag of its own by hand).
      registry_names: for string fields that name a registry entry, the
        valid values: the flag is an enum of them.

    Raises:
      ValueError: if `not_flags` or `registry_names` names no field, or a
        field to become a flag has no default, no help text or no flag type
        (programming errors, found when the CLI module is imported).
    """
    self.config_class = config_class
    self.not_flags = frozenset(not_flags)
    self._fields = {f.name: f for f in dataclasses.fields(config_class)}
    self._hints = typing.get_type_hints(config_class)
    self._registry_names = dict(registry_names or {})
    unknown = sorted(self.not_flags - set(self._fields))
    if unknown:
      raise ValueError(f'not_flags names no field of '
                       f'{config_class.__name__}: {unknown}')
    self.names = tuple(name for name in self._fields
                       if name not in self.not_flags)
    unknown = sorted(set(self._registry_names) - set(self.names))
    if unknown:
      raise ValueError(f'registry_names names no flag field: {unknown}')
    for name in self.names:
      self._check(name)

  def _check(self, name: str) -> None:
    field = self._fields[name]
    where = f'{self.config_class.__name__}.{name}'
    if field.default is dataclasses.MISSING:
      raise ValueError(f'{where} has no default; list it in not_flags')
    if not field.metadata.get(config_lib.HELP):
      raise ValueError(f'{where} has no help; declare it with config.option')
    try:
      _flag_type(self._hints[name])
    except TypeError as e:
      raise ValueError(f'{where}: {e}') from None

  def default(self, name: str) -> Any:
    """The default of field `name`, for a flag the CLI defines by hand."""
    default = self._fields[name].default
    if default is dataclasses.MISSING:
      raise ValueError(f'{self.config_class.__name__}.{name} has no default')
    return default

  def choices(self, name: str) -> Optional[Sequence[str]]:
    """The valid values of flag `name` if it is an enum, else None."""
    if name in self._registry_names:
      return tuple(self._registry_names[name].names)
    return self._fields[name].metadata.get(config_lib.CHOICES)

  def define(self, flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one flag per name in `self.names` in `flag_values`."""
    for name in self.names:
      field = self._fields[name]
      help_text = field.metadata[config_lib.HELP]
      if name in self._registry_names:
        flags.DEFINE_flag(_NameFlag(name, field.default, help_text,
                                    self._registry_names[name]), flag_values)
      elif config_lib.CHOICES in field.metadata:
        flags.DEFINE_enum(name, field.default,
                          list(field.metadata[config_lib.CHOICES]),
                          help_text, flag_values=flag_values)
      else:
        define = _DEFINE_BY_TYPE[_flag_type(self._hints[name])]
        define(name, field.default, help_text, flag_values=flag_values)

  def values(self, flag_values: flags.FlagValues = flags.FLAGS
             ) -> Dict[str, Any]:
    """The generated flags' values, by field name: the config's arguments."""
    return {name: flag_values[name].value for name in self.names}


def define_num_replicas(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines --num_replicas; read it with `num_replicas`."""
  flags.DEFINE_integer(
      'num_replicas', None, f'TPU cores (default {DEFAULT_TPU_REPLICAS} with '
      '--use_tpu, else 1); for a search without --use_tpu, the local GPUs to '
      'mirror over (logical CPU devices on a machine without enough GPUs).',
      flag_values=flag_values)


def num_replicas(flag_values: flags.FlagValues = flags.FLAGS) -> int:
  """--num_replicas, by default 8 with --use_tpu, else 1.

  Raises:
    cli.UsageError: for --use_tpu without --tpu. The config checks the rest
      (a positive count, replicas and batches): a given 0 is passed on, to
      be refused, not taken for the default.
  """
  if flag_values.use_tpu and not flag_values.tpu:
    raise cli.UsageError('--use_tpu needs --tpu=NAME (or a grpc:// address)')
  if flag_values.num_replicas is not None:
    return flag_values.num_replicas
  return DEFAULT_TPU_REPLICAS if flag_values.use_tpu else 1
