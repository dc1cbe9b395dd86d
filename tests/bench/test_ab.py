"""Tests of bench/ab.py: its arithmetic, and an A/B of two commits of a
throw-away repository whose "benchmark" prints a number each commit fixes."""

import io
import json
import os
import subprocess
import sys

import pytest

from tests import files


@pytest.fixture(scope='module')
def ab():
  return files.load_script('bench', 'ab.py')


def test_runs_alternate(ab):
  assert ab.schedule(3) == ['a', 'b', 'a', 'b', 'a', 'b']
  with pytest.raises(ab.AbError, match='--runs must be at least 1, got 0'):
    ab.schedule(0)


def test_figures_are_the_numbers_of_the_last_json_line(ab):
  stdout = ('starting\n{"old": 1}\n'
            '{"benchmark": "x", "step_ms": 12.5, "steps": 3, "ok": true, '
            '"trace": {"search": {"step_ms": 14}}, "names": ["a"]}\n')
  assert ab.parse_figures(stdout) == {'step_ms': 12.5, 'steps': 3.0,
                                      'trace.search.step_ms': 14.0}
  # An indented object (bench/search_step.py prints one) after log lines.
  indented = json.dumps({'a': 1, 'b': {'c': 2}}, indent=2)
  assert ab.parse_figures('{"x": 5}\nlog line\n' + indented + '\n') == {
      'a': 1.0, 'b.c': 2.0}
  with pytest.raises(ab.AbError, match="no JSON object .*'done'"):
    ab.parse_figures('{"x": 1}\n[1, 2]\ndone\n')


def test_medians_and_ratios(ab):
  runs = [{'t': 10.0, 'u': 1.0}, {'t': 30.0}, {'t': 12.0, 'u': 3.0}]
  assert ab.medians(runs) == {'t': 12.0, 'u': 2.0}
  a, b = {'t': 10.0, 'z': 0.0, 'only_a': 1.0}, {'t': 9.0, 'z': 1.0}
  assert ab.ratios(a, b) == {'t': 0.9}  # No ratio over a zero.
  assert ab.ratios(a, b, ['t', 'only_a']) == {'t': 0.9}


def test_a_leading_python_is_this_interpreter(ab):
  assert ab.command_for(['python', 'bench/x.py', '--n=1'], '/v/python') == [
      '/v/python', 'bench/x.py', '--n=1']
  assert ab.command_for(['bash', 'x.sh'], '/v/python') == ['bash', 'x.sh']
  with pytest.raises(ab.AbError, match='no command'):
    ab.command_for([], '/v/python')


def _git(repo, *args):
  subprocess.run(['git', '-C', str(repo), *args], check=True,
                 capture_output=True)


def _commit(repo, value: float) -> str:
  (repo / 'bench').mkdir(exist_ok=True)
  (repo / 'bench' / 'figure.py').write_text(
      'import json, os, sys\n'
      f'print(json.dumps({{"ms": {value}, "argv": len(sys.argv),\n'
      '                  "cwd_is_root": int(os.path.isdir("bench"))}))\n')
  _git(repo, 'add', '-A')
  _git(repo, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm',
       str(value))
  return subprocess.run(['git', '-C', str(repo), 'rev-parse', 'HEAD'],
                        check=True, capture_output=True,
                        text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
  repo = tmp_path / 'repo'
  repo.mkdir()
  _git(repo, 'init', '-q')
  return repo


def test_an_ab_of_two_commits_records_every_run(ab, repo, tmp_path):
  first = _commit(repo, 10.0)
  second = _commit(repo, 8.0)
  results = tmp_path / 'results' / 'ab.jsonl'
  log = io.StringIO()
  record = ab.ab(['python', 'bench/figure.py', '--x'], first, 'HEAD', runs=2,
                 keys=['ms'], work_dir=str(tmp_path / 'work'),
                 results=str(results), repo=str(repo), log=log)
  assert log.getvalue().splitlines()[-1] == 'ab: run 4/4 (b) done: {"ms": 8.0}'
  assert record['a']['commit'] == first and record['b']['commit'] == second
  assert record['command'] == [sys.executable, 'bench/figure.py', '--x']
  runs = [(r['side'], r['run'], r['figures']['ms']) for r in record['runs']]
  assert runs == [('a', 0, 10.0), ('b', 0, 8.0), ('a', 1, 10.0),
                  ('b', 1, 8.0)]
  assert all(r['figures']['cwd_is_root'] == 1 and r['figures']['argv'] == 2
             for r in record['runs'])
  assert record['medians']['a']['ms'] == 10.0
  assert record['ratio_b_over_a'] == {'ms': 0.8}
  assert record['complete'] and record['machine']['cpus'] == os.cpu_count()
  lines = results.read_text().splitlines()
  assert len(lines) == 1 and json.loads(lines[0]) == record
  # The worktrees are gone again.
  assert not list((tmp_path / 'work').iterdir())


def test_the_working_tree_side_runs_uncommitted_code(ab, repo, tmp_path):
  head = _commit(repo, 10.0)
  (repo / 'bench' / 'figure.py').write_text('print(\'{"ms": 5}\')\n')
  record = ab.ab(['python', 'bench/figure.py'], 'HEAD', '.', runs=1,
                 work_dir=str(tmp_path / 'w'),
                 results=str(tmp_path / 'r.jsonl'), repo=str(repo),
                 log=io.StringIO())
  assert record['b'] == {'revision': '.', 'commit': head, 'dirty': True}
  assert record['ratio_b_over_a']['ms'] == 0.5


def test_a_failed_run_keeps_the_runs_before_it(ab, repo, tmp_path):
  good = _commit(repo, 10.0)
  (repo / 'bench' / 'figure.py').write_text('raise SystemExit("broken")\n')
  _git(repo, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qam',
       'broken')
  results = tmp_path / 'r.jsonl'
  with pytest.raises(ab.RunFailed, match='exited with 1: broken'):
    ab.ab(['python', 'bench/figure.py'], good, 'HEAD', runs=2,
          work_dir=str(tmp_path / 'w'), results=str(results), repo=str(repo),
          log=io.StringIO())
  record = json.loads(results.read_text())
  assert not record['complete'] and len(record['runs']) == 1
  assert 'ratio_b_over_a' not in record


def test_bad_input_is_one_line_and_writes_nothing(ab, repo, tmp_path,
                                                  capsys):
  _commit(repo, 10.0)
  results = tmp_path / 'r.jsonl'
  with pytest.raises(ab.AbError, match="unknown revision 'nope'"):
    ab.ab(['python', 'bench/figure.py'], 'nope', 'HEAD', runs=1,
          results=str(results), repo=str(repo))
  assert not results.exists()
  assert ab.main(['--a=HEAD', '--b=HEAD', '--runs=0', '--', 'python',
                  'x.py']) == 2
  assert capsys.readouterr().err.strip() == (
      'ab.py: --runs must be at least 1, got 0')
