"""bin/config_flags.py: the CLIs' flags come from the config fields, so every
default is written once; each field is a flag or explicitly not one; every
preset in configs/ builds a valid config."""

import ast
import dataclasses
import glob
import os
from typing import Optional

from absl import flags
import pytest

from bin import cli
from bin import config_flags
from bin import evaluate_search
from bin import search
from bin import train_eval
from tunas_search import config as config_lib
from tunas_search.config import SearchConfig
from tunas_search.config.evaluation import EvaluationConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TOOLS = [search, train_eval]
# The flag names are a public interface (TuNAS's names, documented by
# --helpfull and used by the presets): pinned here, so that a rename or a
# field that silently becomes a new flag shows up in review.
_SEARCH_FLAGS = {
    'search_space', 'ssd', 'model_dir', 'checkpoint_dir', 'resume_from',
    'dataset', 'data_dir', 'image_size', 'train_batch_size', 'epochs',
    'max_steps', 'model_learning_rate', 'model_warmup_steps_fraction',
    'model_momentum', 'model_weight_decay', 'rl_learning_rate',
    'use_exponential_rl_learning_rate_schedule', 'rl_entropy_regularization',
    'rl_baseline_momentum', 'rl_batch_size_multiplier',
    'rl_delay_steps_fraction', 'increase_ops_warmup_steps_fraction',
    'increase_filters_warmup_steps_fraction', 'rl_temperature',
    'rl_reward_function', 'cost_model', 'rl_cost_model_target',
    'rl_cost_model_exponent', 'use_bfloat16', 'use_gradient_sync_barrier',
    'validation_weights', 'use_tpu', 'tpu', 'tpu_zone', 'gcp_project',
    'num_replicas', 'tpu_iterations_per_loop', 'save_checkpoints_steps',
    'keep_checkpoint_max', 'seed', 'constant_validation_accuracy',
    'multi_worker', 'cost_model_file', 'supernet_widths',
    'unused_weight_steps', 'controller_placement', 'coarse_model_dir',
    'coarse_architecture', 'allow_unreachable_target', 'step_build',
    'retarget_from', 'rl_cost_model_targets'}
_TRAIN_EVAL_FLAGS = {
    'search_space', 'indices', 'search_model_dir', 'model_dir', 'resume_from',
    'mode',
    'dataset', 'data_dir', 'image_size', 'train_split', 'eval_split',
    'train_batch_size', 'eval_batch_size', 'epochs', 'max_steps',
    'steps_per_eval', 'model_learning_rate', 'model_warmup_steps_fraction',
    'model_momentum', 'model_weight_decay', 'label_smoothing', 'dropout_rate',
    'path_dropout_rate', 'init_from_search', 'freeze_backbone',
    'use_bfloat16', 'use_tpu', 'tpu', 'tpu_zone', 'gcp_project',
    'num_replicas', 'tpu_iterations_per_loop', 'save_checkpoints_steps',
    'keep_checkpoint_max', 'seed', 'format', 'final_architecture'}


def _defined(tool) -> flags.FlagValues:
  flag_values = flags.FlagValues()
  tool.define_flags(flag_values)
  return flag_values


def _fields(tool):
  return {f.name: f for f in dataclasses.fields(
      tool.CONFIG_FLAGS.config_class)}


@pytest.mark.parametrize('tool, names', [(search, _SEARCH_FLAGS),
                                         (train_eval, _TRAIN_EVAL_FLAGS)])
def test_flag_names_stay_as_they_are(tool, names):
  assert set(_defined(tool)) == names


@pytest.mark.parametrize('tool', TOOLS)
def test_generated_flags_take_the_fields_default_help_and_choices(tool):
  flag_values, fields = _defined(tool), _fields(tool)
  for name in tool.CONFIG_FLAGS.names:
    flag, field = flag_values[name], fields[name]
    assert flag.default == field.default, name
    assert type(flag.default) is type(field.default), name  # 90.0, not 90.
    assert field.metadata[config_lib.HELP] in flag.help, name
    choices = tool.CONFIG_FLAGS.choices(name)
    if choices is None:
      assert not hasattr(flag.parser, 'enum_values'), name
    else:
      assert list(flag.parser.enum_values) == list(choices), name
  # The enums the brief names: config constants and registries.
  assert (search.CONFIG_FLAGS.choices('validation_weights') ==
          config_lib.VALIDATION_WEIGHTS)
  assert list(search.CONFIG_FLAGS.choices('rl_reward_function')) == (
      search.rewards.REGISTRY.names())


@pytest.mark.parametrize('tool', TOOLS)
def test_every_field_is_a_flag_or_explicitly_not_one(tool):
  fields = set(_fields(tool))
  generated = set(tool.CONFIG_FLAGS.names)
  assert generated | tool.CONFIG_FLAGS.not_flags == fields
  assert not generated & tool.CONFIG_FLAGS.not_flags
  assert generated <= set(_defined(tool))


def _hand_defined(path):
  """(flag name, default expression) of each flag a bin/ file defines."""
  tree = ast.parse(open(os.path.join(ROOT, path)).read())
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith(('DEFINE_', 'define_'))
        and node.args and isinstance(node.args[0], ast.Constant)):
      default = node.args[1] if len(node.args) > 1 else None
      yield node.args[0].value, default


@pytest.mark.parametrize('tool', TOOLS)
def test_no_default_is_written_twice(tool):
  """A hand-defined flag of a config field never repeats its default."""
  path = os.path.relpath(tool.__file__, ROOT)
  fields, flag_values = _fields(tool), _defined(tool)
  hand = dict(_hand_defined(path))
  assert 'model_learning_rate' not in hand  # Parsing found the calls...
  assert 'search_space' in hand  # ...and only the hand-written ones.
  for name, default in hand.items():
    assert name not in tool.CONFIG_FLAGS.names, name
    if name in fields and name != 'search_space':  # Required: no default.
      # None (derived: the dataset's, the space's, ...) or read from the
      # field (`CONFIG_FLAGS.default`), never a literal of its own.
      assert not isinstance(default, ast.Constant) or default.value is None, (
          path, name)
      assert flag_values[name].default in (None, cli.AUTO,
                                           fields[name].default), name


@pytest.mark.parametrize('tool', TOOLS)
def test_flags_belong_to_the_tool_not_the_helpers(tool):
  """--help lists a tool's own flags: its module defined them, not cli."""
  flag_values = _defined(tool)
  modules = flag_values.flags_by_module_dict()
  assert 'bin.cli' not in modules and 'bin.config_flags' not in modules
  owned = {flag.name for flag in modules[tool.__name__]}
  assert owned == set(flag_values)


@pytest.mark.parametrize('args, message', [
    (['--rl_reward_function=exp'], "flag --rl_reward_function=exp: unknown "
     "reward function 'exp'; valid choices: abs, mnas, mnas_hard"),
    (['--cost_model=flops'], "flag --cost_model=flops: unknown cost model "
     "'flops'; valid choices: madds, measured, params, pixel1_latency, none"),
    (['--validation_weights=after'], 'flag --validation_weights=after: value '
     'should be one of <pre_update|post_update>'),
    (['--epochs=many'], 'flag --epochs=many'),
])
def test_bad_enum_and_number_values_are_one_line(args, message):
  with pytest.raises(flags.IllegalFlagValueError) as error:
    _defined(search)(['search.py', *args])
  assert str(error.value).startswith(message)
  assert '\n' not in str(error.value)


# Presets of bin/evaluate_search.py; every other preset is a search's.
EVALUATION_PRESETS = ('paper_question.cfg', 'paper_question_powered.cfg',
                      'evaluation_pilot.cfg', 'retarget_question.cfg')
PRESETS = sorted(p for p in glob.glob(os.path.join(ROOT, 'configs', '*.cfg'))
                 if os.path.basename(p) not in EVALUATION_PRESETS)


def test_presets_are_found():
  names = {os.path.basename(p) for p in PRESETS}
  assert {'smoke_cpu.cfg', 'imagenet_proxylessnas_tpu.cfg',
          'imagenet_proxylessnas_enlarged_tpu.cfg',
          'imagenet_mobilenet_v3_like_tpu.cfg'} <= names


@pytest.mark.parametrize('preset', PRESETS, ids=os.path.basename)
def test_every_preset_builds_a_valid_config(preset, tmp_path):
  flag_values = _defined(search)
  flag_values(['search.py', f'--flagfile={preset}',
               f'--model_dir={tmp_path / "run"}', '--tpu=x'])
  config = search.build_config(flag_values)
  assert isinstance(config, SearchConfig)
  for name, value in search.CONFIG_FLAGS.values(flag_values).items():
    assert getattr(config, name) == value, name
  assert SearchConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize('preset', EVALUATION_PRESETS)
def test_every_evaluation_preset_builds_a_valid_config(preset, tmp_path):
  flag_values = _defined(evaluate_search)
  flag_values(['evaluate_search.py',
               f'--flagfile={os.path.join(ROOT, "configs", preset)}',
               f'--output_dir={tmp_path}', '--search_model_dir=/s1'])
  config = evaluate_search.build_config(flag_values)
  assert isinstance(config, EvaluationConfig)
  for name, value in evaluate_search.CONFIG_FLAGS.values(
      flag_values).items():
    assert getattr(config, name) == value, name
  assert EvaluationConfig.from_json(config.to_json()) == config


# ConfigFlags on its own --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Toy:
  required: str
  count: int = config_lib.option(3, 'A count.')
  rate: Optional[float] = config_lib.option(None, 'A rate.')
  kind: str = config_lib.option('a', 'A kind.', choices=('a', 'b'))
  on: bool = config_lib.option(True, 'Switch.')


def test_config_flags_round_trip():
  toy = config_flags.ConfigFlags(_Toy, ['required'])
  assert toy.names == ('count', 'rate', 'kind', 'on')
  flag_values = flags.FlagValues()
  toy.define(flag_values)
  flag_values(['toy', '--count=5', '--rate=0.5', '--kind=b', '--noon'])
  assert _Toy(required='x', **toy.values(flag_values)) == _Toy(
      'x', count=5, rate=0.5, kind='b', on=False)
  flag_values.unparse_flags()
  flag_values(['toy'])
  assert _Toy(required='x', **toy.values(flag_values)) == _Toy('x')
  assert toy.default('count') == 3


def test_a_field_cannot_be_forgotten():
  """A new field without a default or help fails when the CLI is imported."""
  with pytest.raises(ValueError, match=r'_Toy.required has no default; '
                     'list it in not_flags'):
    config_flags.ConfigFlags(_Toy, [])

  @dataclasses.dataclass(frozen=True)
  class Undocumented:
    count: int = 3

  with pytest.raises(ValueError, match='Undocumented.count has no help'):
    config_flags.ConfigFlags(Undocumented, [])
  with pytest.raises(ValueError, match=r"names no field of _Toy: \['nope'\]"):
    config_flags.ConfigFlags(_Toy, ['required', 'nope'])


def test_num_replicas_default_depends_on_use_tpu():
  flag_values = flags.FlagValues()
  flags.DEFINE_bool('use_tpu', False, '', flag_values=flag_values)
  flags.DEFINE_string('tpu', None, '', flag_values=flag_values)
  config_flags.define_num_replicas(flag_values)
  flag_values(['t'])
  assert config_flags.num_replicas(flag_values) == 1
  flag_values(['t', '--use_tpu', '--tpu=x'])
  assert config_flags.num_replicas(flag_values) == 8
  flag_values(['t', '--num_replicas=32'])
  assert config_flags.num_replicas(flag_values) == 32
  # Given values pass on, to be refused by the config, never taken for
  # "unset" (0 used to become the default).
  for given in (0, -1):
    flag_values(['t', f'--num_replicas={given}'])
    assert config_flags.num_replicas(flag_values) == given
  flag_values.unparse_flags()
  flag_values(['t', '--use_tpu'])
  with pytest.raises(cli.UsageError, match='--use_tpu needs --tpu=NAME'):
    config_flags.num_replicas(flag_values)


def test_empty_values_of_unset_string_flags_are_refused():
  flag_values = flags.FlagValues()
  flags.DEFINE_string('plot', None, '', flag_values=flag_values)
  flags.DEFINE_alias('figure', 'plot', flag_values=flag_values)
  flags.DEFINE_string('dataset', 'embedded', '', flag_values=flag_values)
  flags.DEFINE_integer('steps', None, '', flag_values=flag_values)
  flag_values(['t', '--plot=x.png', '--dataset='])
  cli.check_no_empty_values(flag_values)  # The dataset's own check names it.
  for argv, name in ((['--plot='], 'plot'), (['--figure='], 'figure')):
    flag_values.unparse_flags()
    flag_values(['t', *argv])
    with pytest.raises(cli.UsageError, match=(
        f'^--{name} is empty; give a value or leave the flag out$')):
      cli.check_no_empty_values(flag_values)
