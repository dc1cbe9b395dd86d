"""Search spaces from a user's code: MODULE:FUNCTION, entry points, validation."""

import dataclasses
import sys
import textwrap

import pytest

import search_spaces
from examples import my_spaces
from search_spaces import plugins
from search_spaces import validation
from search_spaces.validation import SpecError
from tunas_search.space import schema
from tunas_search.registry import UnknownNameError
from tunas_search.space.schema import OneOf
from tunas_search.space.specs import (Activation, Block, Conv, ConvTower,
                                      DepthwiseBottleneck, FilterMultiplier,
                                      GlobalAveragePool, Residual,
                                      UniversalInvertedBottleneck)


def _tower(*blocks):
  return ConvTower(tuple(blocks))


def _head():
  return Block((Conv(1), Activation('relu'), GlobalAveragePool()), 16)


def test_the_tutorial_space_is_valid_and_resolves_by_reference():
  validation.check_spec(my_spaces.tiny(), image_size=28)
  space = search_spaces.get('examples.my_spaces:tiny')
  assert space.origin == plugins.MODULE
  assert space.name == 'examples.my_spaces:tiny'
  assert space.spec() == my_spaces.tiny()
  assert space.cost_model == 'madds'  # Pixel-1 does not apply.
  assert space.description.startswith('Tiny: a stem')
  assert len(schema.decisions(space.spec())) == 12


@pytest.mark.parametrize('spec, path, message', [
    (_tower(Block((Conv(3),), OneOf([8], schema.FILTERS)), _head()),
     'blocks/0/filters', 'at least two choices'),
    (_tower(Block((Conv(3), 'gelu'), 8), _head()),
     'blocks/0/layers/1', 'unknown layer type str'),
    (_tower(Block((Conv(3),), OneOf([8, 'wide'], schema.FILTERS)), _head()),
     'blocks/0/filters/choices/1', 'must be a positive int'),
    (_tower(Block((Conv(3),), OneOf([8, 8], schema.FILTERS)), _head()),
     'blocks/0/filters', 'width choices repeat'),
    (_tower(Block((Conv(3),), OneOf([8, 16], schema.OP)), _head()),
     'blocks/0/filters', 'tagged schema.FILTERS'),
    (_tower(Block((DepthwiseBottleneck(3, OneOf([2.0, 3.0],
                                                schema.FILTERS)),), 8),
            _head()),
     'blocks/0/layers/0/expansion_filters/choices/0', 'FilterMultiplier'),
    (_tower(Block((Residual(Conv(3, strides=2)),), 8), _head()),
     'blocks/0/layers/0', 'stride 1'),
    (_tower(Block((OneOf([Conv(3), Conv(3, strides=2)], schema.OP),), 8),
            _head()),
     'blocks/0/layers/0', 'same stride'),
    (_tower(*[Block((Conv(3, strides=2),), 8)] * 6, _head()),
     'blocks/5/layers/0', 'stride 2 on a 1x1 feature map'),
    (Block((Conv(3),), 8), '', 'expected a specs.ConvTower'),
    (_tower(Block((UniversalInvertedBottleneck(
        OneOf([0, -3], schema.OP), 3, FilterMultiplier(4.0)),), 8), _head()),
     'blocks/0/layers/0/start_kernel_size/choices/1',
     'a kernel size must be an int >= 0 (0: none), got -3'),
    (_tower(Block((UniversalInvertedBottleneck(0, 3, 4.0),), 8), _head()),
     'blocks/0/layers/0/expansion_filters', 'FilterMultiplier'),
])
def test_bad_specs_name_their_path(spec, path, message):
  with pytest.raises(SpecError) as raised:
    validation.check_spec(spec, image_size=28)
  assert raised.value.path == path
  assert str(raised.value) == f'spec path {path or "<root>"}: ' + (
      raised.value.message)
  assert message in str(raised.value)


def test_strides_are_checked_against_the_image_size():
  # 28 -> 14 -> 7 -> 4 -> 2 -> 1: five stride-2 layers fit, a sixth does not.
  five = _tower(*[Block((Conv(3, strides=2),), 8)] * 5, _head())
  validation.check_spec(five, image_size=28)
  with pytest.raises(SpecError):
    validation.check_spec(five, image_size=16)
  validation.check_spec(five)  # Without an image size: not checked.


def test_layer_types_are_the_builders():
  from tunas_search.supernet import builder  # pylint: disable=g-import-not-at-top
  assert set(validation.LAYER_TYPES) | {OneOf} == set(builder._BUILDERS)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
  """A module `user_spaces_<n>` in tmp_path; returns a writer."""
  monkeypatch.syspath_prepend(str(tmp_path))
  written = []

  def write(source):
    name = f'user_spaces_{len(written)}'
    (tmp_path / f'{name}.py').write_text(textwrap.dedent(source))
    written.append(name)
    return name
  yield write
  for name in written:
    sys.modules.pop(name, None)


def test_function_returning_a_search_space(user_module):
  name = user_module('''
      import search_spaces
      from examples import my_spaces
      def space():
        return search_spaces.SearchSpace('ignored', my_spaces.tiny,
                                         default_cost_model='params',
                                         default_cost_target=5e4)
      ''')
  space = search_spaces.get(f'{name}:space')
  assert space.name == f'{name}:space'  # The name that reaches config.json.
  assert (space.cost_model, space.default_cost_target) == ('params', 5e4)


@pytest.mark.parametrize('source, attribute, message', [
    ('x = 1\n', 'missing', "has no 'missing'"),
    ('x = 1\n', 'x', 'expected a SearchSpace or a function'),
    ('def f():\n  return 3\n', 'f', 'expected a specs.ConvTower'),
    ('def f():\n  raise ValueError("no")\n', 'f',
     'building the spec failed: ValueError: no'),
    ('raise RuntimeError("boom")\n', 'f', 'RuntimeError: boom'),
])
def test_bad_references_are_one_line(user_module, source, attribute,
                                     message):
  name = user_module(source)
  with pytest.raises(plugins.SearchSpaceError) as raised:
    search_spaces.get(f'{name}:{attribute}')
  assert message in str(raised.value)
  assert str(raised.value).startswith(f'{name}:{attribute}: ')


def test_a_bad_spec_names_the_space_and_the_path(user_module):
  name = user_module('''
      from tunas_search.space import schema
      from tunas_search.space.schema import OneOf
      from tunas_search.space.specs import Block, Conv, ConvTower
      def one_choice():
        return ConvTower((Block((Conv(OneOf([3], schema.OP)),), 8),))
      ''')
  with pytest.raises(SpecError) as raised:
    search_spaces.get(f'{name}:one_choice')
  assert str(raised.value).startswith(
      f'{name}:one_choice: spec path blocks/0/layers/0/kernel_size: ')


def test_unknown_names_list_the_valid_ones_and_the_reference_form():
  with pytest.raises(UnknownNameError) as raised:
    search_spaces.get('nope')
  assert 'proxylessnas_search' in str(raised.value)
  assert 'MODULE:FUNCTION' in str(raised.value)
  with pytest.raises(plugins.SearchSpaceError, match='no module named'):
    search_spaces.get('no_such_module_here:f')


@dataclasses.dataclass
class _EntryPoint:
  name: str
  value: str
  target: object

  def load(self):
    return self.target


def test_entry_points_are_listed_without_loading_and_loaded_when_named(
    monkeypatch):
  loaded = []

  def spec():
    loaded.append(True)
    return my_spaces.tiny()
  points = {'plugged_tiny': _EntryPoint('plugged_tiny', 'pkg:spec', spec),
            'proxylessnas_search': _EntryPoint('proxylessnas_search',
                                               'pkg:shadow', spec)}
  monkeypatch.setattr(plugins, 'entry_points', lambda: points)
  assert 'plugged_tiny' in search_spaces.names()
  assert 'plugged_tiny' in search_spaces.search_space_names()
  assert search_spaces.names().count('proxylessnas_search') == 1
  assert not loaded
  space = search_spaces._load.__wrapped__('plugged_tiny')
  assert loaded and space.origin == plugins.PLUGIN
  # A shipped space keeps its name.
  assert search_spaces.get('proxylessnas_search').origin == plugins.BUILTIN
