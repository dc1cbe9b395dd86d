"""Checks every module's imports against docs/DESIGN.md's module table.

The table ("Modules and what they may import") is the one statement of the
rules: this test parses it, parses the imports of every module under
tunas_search/, search_spaces/ and bin/ (ast, nothing is imported), and fails
naming the module, the line and the import that breaks a rule. It also keeps
TensorFlow's internals behind one door (docs/DESIGN.md, "TensorFlow
internals"): outside tunas_search/tf_internals/, no module imports a private
TensorFlow module or overrides a gradient (bench/ and tools/ included), and
no library module or CLI uses a protected member of an object other than
itself or a project module.
"""

import ast
import dataclasses
import os
import re
import sys
from typing import Dict, FrozenSet, Iterator, List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DESIGN = os.path.join(ROOT, 'docs', 'DESIGN.md')
SECTION = '## Modules and what they may import'
LIBRARY = 'tunas_search'
# Top-level packages that are one table row each; every other row is a
# module or subpackage of the library.
PACKAGE_ROWS = ('search_spaces', 'bin')
PACKAGES = (LIBRARY,) + PACKAGE_ROWS
TENSORFLOW_LEVELS = ('yes', 'in functions', 'no')


@dataclasses.dataclass(frozen=True)
class Rule:
  """One row of the table.

  Attributes:
    row: the module as the table names it, e.g. `registry.py`, `supernet/`
      or one module of a package with a row of its own, e.g.
      `cost_models/calibration.py` (unit `cost_models/calibration`).
    may_import: units it may import; `tunas_search` allows every library one.
    tensorflow: 'yes', 'in functions' or 'no'.
  """
  row: str
  may_import: FrozenSet[str]
  tensorflow: str


@dataclasses.dataclass(frozen=True)
class Import:
  module: str  # Dotted and absolute, e.g. 'tunas_search.space.schema'.
  line: int
  in_function: bool


def _unit_of_row(row: str) -> str:
  return row[:-len('.py')] if row.endswith('.py') else row.rstrip('/')


def read_rules(path: str = DESIGN) -> Dict[str, Rule]:
  """The table of docs/DESIGN.md as unit name -> Rule."""
  with open(path) as f:
    text = f.read()
  assert SECTION in text, f'{path} has no section {SECTION!r}'
  section = text.split(SECTION, 1)[1].split('\n## ', 1)[0]
  rules = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if not line.startswith('|') or len(cells) != 4 or cells[0] in (
        'module', '---'):
      continue
    row = cells[0].strip('`')
    tensorflow = cells[3]
    assert tensorflow in TENSORFLOW_LEVELS, (
        f'{path}: row {row}: TensorFlow must be one of {TENSORFLOW_LEVELS}, '
        f'got {tensorflow!r}')
    unit = _unit_of_row(row)
    assert unit not in rules, f'{path}: two rows for {row}'
    may_import = frozenset(_unit_of_row(name) for name in
                           re.findall(r'`([\w./]+)`', cells[2]))
    rules[unit] = Rule(row, may_import, tensorflow)
  assert rules, f'{path}: no rows under {SECTION!r}'
  return rules


def module_name(relpath: str) -> str:
  """'tunas_search/supernet/ops.py' -> 'tunas_search.supernet.ops'."""
  name = relpath[:-len('.py')].replace(os.sep, '.')
  return name[:-len('.__init__')] if name.endswith('.__init__') else name


def unit_of(module: str) -> Optional[str]:
  """The table row (unit) a project module belongs to; None if external.

  A module of a package is its package's unit unless the table gives the
  module a row of its own.
  """
  parts = module.split('.')
  if parts[0] in PACKAGE_ROWS:
    return parts[0]
  if parts[0] == LIBRARY:
    own = '/'.join(parts[1:3])
    if len(parts) > 2 and own in MODULE_ROWS:
      return own
    return parts[1] if len(parts) > 1 else '__init__'
  return None


def _is_module(dotted: str) -> bool:
  path = os.path.join(ROOT, *dotted.split('.'))
  return os.path.isfile(path + '.py') or os.path.isdir(path)


def _is_type_checking(node: ast.If) -> bool:
  test = node.test
  return ((isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or
          (isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING'))


def imports_of(relpath: str, source: str) -> List[Import]:
  """Every import a module runs, resolved to absolute dotted names.

  `from package import name` counts as importing `package.name` (a submodule
  or a name of a third-party package, e.g. `absl.flags`), or `package`
  itself when `name` is an object of a project package. Imports under
  `if TYPE_CHECKING:` are skipped: they never run.
  """
  this = module_name(relpath)
  package = this if relpath.endswith('__init__.py') else this.rpartition('.')[0]
  found: List[Import] = []

  def visit(node: ast.AST, in_function: bool) -> None:
    if isinstance(node, ast.If) and _is_type_checking(node):
      for child in node.orelse:
        visit(child, in_function)
      return
    if isinstance(node, ast.Import):
      found.extend(Import(a.name, node.lineno, in_function)
                   for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        parent = package.split('.')[:len(package.split('.')) - node.level + 1]
        base = '.'.join(parent + ([node.module] if node.module else []))
      for alias in node.names:
        full = f'{base}.{alias.name}'
        project = unit_of(base) is not None
        name = base if project and not _is_module(full) else full
        found.append(Import(name, node.lineno, in_function))
    in_function = in_function or isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    for child in ast.iter_child_nodes(node):
      visit(child, in_function)

  visit(ast.parse(source, relpath), False)
  return found


def _is_tensorflow(module: str) -> bool:
  return module.split('.')[0].startswith('tensorflow')


def _is_absl_flags(module: str) -> bool:
  return module == 'absl.flags' or module.startswith('absl.flags.')


def violations(relpath: str, source: str,
               rules: Dict[str, Rule]) -> List[str]:
  """What breaks the rules in one module, one readable line each."""
  unit = unit_of(module_name(relpath))
  if unit not in rules:
    return [f'{relpath} has no row in the module table of docs/DESIGN.md '
            f'(add one saying why it exists and what it may import)']
  rule = rules[unit]
  out = []
  for imp in imports_of(relpath, source):
    where = f'{relpath}:{imp.line} imports {imp.module}'
    target = unit_of(imp.module)
    if target is not None and target != unit:
      allowed = (target in rule.may_import or
                 (LIBRARY in rule.may_import and
                  imp.module.split('.')[0] == LIBRARY))
      if not allowed:
        listed = ', '.join(sorted(rule.may_import)) or 'no project module'
        out.append(f'{where}: docs/DESIGN.md lets `{rule.row}` import only '
                   f'{listed}')
    if _is_absl_flags(imp.module) and unit != 'bin':
      out.append(f'{where}: flags live in bin/ only (docs/DESIGN.md, '
                 '"Layers of the code")')
    if _is_tensorflow(imp.module):
      if rule.tensorflow == 'no':
        out.append(f'{where}: docs/DESIGN.md says `{rule.row}` never loads '
                   'TensorFlow')
      elif rule.tensorflow == 'in functions' and not imp.in_function:
        out.append(f'{where} at module level: docs/DESIGN.md says `{rule.row}` '
                   'imports TensorFlow only inside functions')
  return out


# The one package that may use TensorFlow's internals.
INTERNALS = 'tunas_search/tf_internals/'
# Top-level folders whose scripts may not use them either.
SCRIPT_DIRS = ('bench', 'tools')
GRADIENT_OVERRIDES = ('RegisterGradient', 'gradient_override_map')
# Underscore names that are public API: namedtuple's methods and fields.
PUBLIC_UNDERSCORED = frozenset({'_replace', '_asdict', '_fields', '_make',
                                '_field_defaults'})
# Known exceptions, by (module, member), each with the reason it stays.
KNOWN_PROTECTED = frozenset()
_DOOR = ('live in tunas_search/tf_internals/ only (docs/DESIGN.md, '
         '"TensorFlow internals")')


def _is_private_tensorflow(module: str) -> bool:
  """`tensorflow.python...`, `tensorflow.core...`: not `tf` or `tf.compat`."""
  parts = module.split('.')
  return (parts[0] == 'tensorflow' and len(parts) > 1
          and parts[1] != 'compat')


def _project_names(tree: ast.AST) -> FrozenSet[str]:
  """Local names bound to project modules or their contents by imports."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update((a.asname or a.name).split('.')[0] for a in node.names
                   if unit_of(a.name) is not None)
    elif isinstance(node, ast.ImportFrom) and (
        node.level or unit_of(node.module or '') is not None):
      names.update(a.asname or a.name for a in node.names)
  return frozenset(names)


def _protected_use(node: ast.AST, exempt: FrozenSet[str]) -> Optional[str]:
  """`x._member` as written, if `x` is not self, cls or an `exempt` name."""
  if not (isinstance(node, ast.Attribute) and node.attr.startswith('_')
          and not node.attr.startswith('__')
          and node.attr not in PUBLIC_UNDERSCORED):
    return None
  owner = node.value
  if isinstance(owner, ast.Name) and owner.id in {'self', 'cls'} | exempt:
    return None
  return ast.unparse(node)


def internals_violations(relpath: str, source: str) -> List[str]:
  """Uses of TensorFlow's internals outside their package, one line each.

  Private TensorFlow imports and gradient overrides count everywhere;
  protected members only in the packages of the module table.
  """
  if relpath.startswith(INTERNALS):
    return []
  tree = ast.parse(source, relpath)
  out = [f'{relpath}:{imp.line} imports {imp.module}: TensorFlow\'s private '
         f'modules {_DOOR}' for imp in imports_of(relpath, source)
         if _is_private_tensorflow(imp.module)]
  exempt = _project_names(tree)
  library = relpath.split('/')[0] in PACKAGES
  for node in ast.walk(tree):
    name = (node.attr if isinstance(node, ast.Attribute) else
            node.id if isinstance(node, ast.Name) else None)
    if name in GRADIENT_OVERRIDES:
      out.append(f'{relpath}:{node.lineno} uses {name}: gradient overrides '
                 f'{_DOOR}')
    used = _protected_use(node, exempt) if library else None
    if used and (relpath, node.attr) not in KNOWN_PROTECTED:
      out.append(f'{relpath}:{node.lineno} uses {used}: protected members of '
                 f'TensorFlow\'s objects {_DOOR}')
  return out


def _module_paths(packages=PACKAGES) -> Iterator[str]:
  for package in packages:
    for directory, subdirs, files in os.walk(os.path.join(ROOT, package)):
      subdirs[:] = sorted(d for d in subdirs if not d.startswith(('.', '_')))
      for name in sorted(files):
        if name.endswith('.py'):
          yield os.path.relpath(os.path.join(directory, name), ROOT)


RULES = read_rules()
# Units that are one module of a package (`cost_models/calibration`).
MODULE_ROWS = frozenset(unit for unit in RULES if '/' in unit)
MODULES = list(_module_paths())
SCRIPTS = list(_module_paths(SCRIPT_DIRS))


@pytest.mark.parametrize('relpath', MODULES)
def test_module_follows_the_design_table(relpath):
  with open(os.path.join(ROOT, relpath)) as f:
    source = f.read()
  problems = (violations(relpath, source, RULES)
              + internals_violations(relpath, source))
  assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('relpath', SCRIPTS)
def test_scripts_keep_tensorflow_internals_behind_the_door(relpath):
  with open(os.path.join(ROOT, relpath)) as f:
    problems = internals_violations(relpath, f.read())
  assert not problems, '\n'.join(problems)


def test_every_row_names_an_existing_module():
  units = {unit_of(module_name(p)) for p in MODULES}
  stale = sorted(r.row for u, r in RULES.items() if u not in units)
  assert not stale, f'docs/DESIGN.md module table: no such module {stale}'
  unknown = {rule.row: sorted(rule.may_import - units - {LIBRARY})
             for rule in RULES.values()}
  unknown = {row: names for row, names in unknown.items() if names}
  assert not unknown, f'docs/DESIGN.md module table: unknown modules {unknown}'


def test_the_library_never_imports_search_spaces_or_bin():
  for unit, rule in RULES.items():
    if unit not in PACKAGE_ROWS:
      assert not rule.may_import & set(PACKAGE_ROWS), rule.row
  assert not RULES['search_spaces'].may_import & {'bin'}


def test_modules_without_tensorflow_import_none_that_loads_it():
  for rule in RULES.values():
    if rule.tensorflow != 'yes':
      loads = sorted(RULES[u].row for u in rule.may_import
                     if u in RULES and RULES[u].tensorflow == 'yes')
      assert not loads, (f'docs/DESIGN.md: `{rule.row}` (TensorFlow: '
                         f'{rule.tensorflow}) may import {loads}, which load '
                         'TensorFlow')


@pytest.mark.parametrize('unit', ['registry', 'space', 'search_spaces'])
def test_the_spec_layer_never_loads_tensorflow(unit):
  assert RULES[unit].tensorflow == 'no'


# The checker itself, on made-up modules.
@pytest.mark.parametrize('relpath, source, expected', [
    ('tunas_search/space/schema.py', 'import tensorflow as tf\n',
     'tunas_search/space/schema.py:1 imports tensorflow: docs/DESIGN.md says '
     '`space/` never loads TensorFlow'),
    ('tunas_search/config/fields.py', 'def f():\n  import tensorflow\n'
     'import tensorflow.compat.v1\n',
     'tunas_search/config/fields.py:3 imports tensorflow.compat.v1 at module '
     'level'),
    ('tunas_search/search/model_fn.py', 'from absl import flags\n',
     'tunas_search/search/model_fn.py:1 imports absl.flags: flags live in bin/ only'),
    ('tunas_search/supernet/ops.py', 'import search_spaces\n',
     'tunas_search/supernet/ops.py:1 imports search_spaces: docs/DESIGN.md '
     'lets `supernet/` import only space, tf_internals'),
    ('search_spaces/x.py', 'from tunas_search import supernet\n',
     'search_spaces/x.py:1 imports tunas_search.supernet'),
    ('tunas_search/space/specs.py', 'from .. import controller\n',
     'tunas_search/space/specs.py:1 imports tunas_search.controller'),
    ('tunas_search/newmodule.py', '',
     'tunas_search/newmodule.py has no row in the module table'),
])
def test_checker_reports_the_module_and_the_import(relpath, source, expected):
  problems = violations(relpath, source, RULES)
  assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_module_row_of_a_package_is_a_unit_of_its_own(monkeypatch, tmp_path):
  table = tmp_path / 'DESIGN.md'
  table.write_text(
      f'{SECTION}\n\n| module | why | may import | TensorFlow |\n|---|---|---|---|\n'
      '| `pkg/` | a package | `pkg/light.py` | yes |\n'
      '| `pkg/light.py` | its TensorFlow-free module | | no |\n'
      '| `other.py` | | `pkg` | no |\n')
  rules = read_rules(str(table))
  monkeypatch.setattr(sys.modules[__name__], 'MODULE_ROWS',
                      frozenset({'pkg/light'}))
  assert set(rules) == {'pkg', 'pkg/light', 'other'}
  assert unit_of('tunas_search.pkg.light') == 'pkg/light'
  assert unit_of('tunas_search.pkg.heavy') == 'pkg'
  # The package's other modules may import it only as the table says, and it
  # keeps its own TensorFlow level.
  assert violations('tunas_search/pkg/heavy.py',
                    'import tunas_search.pkg.light\n', rules) == []
  light = violations('tunas_search/pkg/light.py',
                     'import tensorflow\nimport tunas_search.pkg.heavy\n',
                     rules)
  assert len(light) == 2 and 'never loads TensorFlow' in light[0], light
  assert 'lets `pkg/light.py` import only no project module' in light[1]
  assert violations('tunas_search/other.py',
                    'import tunas_search.pkg.light\n', rules)


@pytest.mark.parametrize('relpath, source', [
    ('tunas_search/config/fields.py', 'def f():\n  import tensorflow as tf\n'),
    ('tunas_search/cost_models/__init__.py',
     'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n'
     '  from tunas_search.config import SearchConfig\n'),
    ('tunas_search/supernet/builder.py',
     'from tunas_search.supernet import ops\nfrom . import widths\n'),
    ('bin/x.py', 'from absl import flags\nfrom . import cli\n'
     'from tunas_search.search import runner\nimport search_spaces\n'),
])
def test_checker_accepts_what_the_table_allows(relpath, source):
  assert violations(relpath, source, RULES) == []


# The door itself, on made-up modules: each rule bites outside it.
@pytest.mark.parametrize('relpath, source, expected', [
    ('tunas_search/search/model_fn.py',
     'from tensorflow.python.ops import control_flow_grad\n',
     'tunas_search/search/model_fn.py:1 imports '
     'tensorflow.python.ops.control_flow_grad: TensorFlow\'s private '
     'modules live in tunas_search/tf_internals/ only'),
    ('tunas_search/runtime/estimators.py',
     'def f():\n  from tensorflow.core.protobuf import rewriter_config_pb2\n',
     'tunas_search/runtime/estimators.py:2 imports '
     'tensorflow.core.protobuf.rewriter_config_pb2: TensorFlow\'s private'),
    ('bench/x.py', 'import tensorflow.python.compiler.xla\n',
     'bench/x.py:1 imports tensorflow.python.compiler.xla: '),
    ('tunas_search/supernet/widths.py',
     'import tensorflow as tf\n@tf.RegisterGradient("X")\n'
     'def g(op, grad):\n  return grad\n',
     'tunas_search/supernet/widths.py:2 uses RegisterGradient: gradient '
     'overrides live in tunas_search/tf_internals/ only'),
    ('tools/x.py', 'def f(g):\n  with g.gradient_override_map({}):\n'
     '    pass\n', 'tools/x.py:2 uses gradient_override_map: '),
    ('tunas_search/supernet/ops.py', 'def f(op):\n  op._set_device("x")\n',
     'tunas_search/supernet/ops.py:2 uses op._set_device: protected members '
     'of TensorFlow\'s objects live in tunas_search/tf_internals/ only'),
    ('bin/x.py', 'def f(saver):\n  saver._set_steps_per_run(3)\n',
     'bin/x.py:2 uses saver._set_steps_per_run: protected members'),
    ('tunas_search/search/runner.py', 'def f():\n  return super()._save()\n',
     'tunas_search/search/runner.py:2 uses super()._save: protected members'),
])
def test_the_door_bites_outside_tf_internals(relpath, source, expected):
  problems = internals_violations(relpath, source)
  assert len(problems) == 1 and problems[0].startswith(expected), problems


@pytest.mark.parametrize('relpath, source', [
    ('tunas_search/tf_internals/graph.py',
     'from tensorflow.python.framework import function\n'
     'def f(op, g):\n  op._add_control_input(g)\n'
     '  with g.gradient_override_map({}):\n    pass\n'),
    ('tunas_search/x.py', 'class A:\n  def f(self):\n    return self._x\n'
     '  @classmethod\n  def g(cls):\n    return cls._y\n'),
    ('tunas_search/results/summaries.py',
     'from tunas_search.space import architecture\n'
     'architecture._layer_token(1)\n'),
    ('bin/x.py', 'from . import cli\ncli._helper()\n'),
    ('tunas_search/x.py', 'import tensorflow.compat.v1 as tf1\n'
     'def f(t):\n  return t._replace(a=1)._asdict()\n'),
    # Tests may use internals: only the project's own code is held to it.
    ('bench/x.py', 'def f(search):\n  return search._all_finite\n'),
])
def test_the_door_allows_what_it_should(relpath, source):
  assert internals_violations(relpath, source) == []
