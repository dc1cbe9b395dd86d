"""bin/evaluate_search.py end to end on a tiny search, and its bad input.

The smallest evaluation that still has every part: a finished search of the
tiny space (tests/e2e/tiny.py), its argmax and one random architecture
scored one-shot and trained stand-alone (one seed, two steps each), split
over two shards, one shard killed in its training and rerun, then reported
by `--report_only` (the tool's `main`); and the same evaluation of a
retarget of that search.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bin import evaluate_search as cli
from tests.bin import one_process
from tests import files as files_lib
from tests.e2e import faults
from tests.e2e import tiny
from tunas_search.space import architecture
from tunas_search import data
from tunas_search.runtime import model_dir as model_dir_lib
from tunas_search.search import retarget
from tunas_search.search import runner
from tunas_search import supernet
from tunas_search.evaluation import job
from tunas_search.evaluation import one_shot
from tunas_search.evaluation import report
from tunas_search.evaluation.worklist import EvaluationError
from tunas_search.standalone import warm_start
from tunas_search.supernet import forms

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TOOL = os.path.join(ROOT, 'bin', 'evaluate_search.py')
# Only stops a hung tool; not a speed requirement.
HANG_GUARD_S = 600
# Cheapest settings: the tiny space's MAdds window +-1.2% around 1e5 holds
# two architectures (tests/evaluation/test_candidates.py).
SMALL = ('--final_architecture=argmax', '--num_random=1',
         '--num_random_own_cost=0', '--seeds=1', '--train_batch_size=8',
         '--train_steps=2', '--eval_batch_size=1000', '--one_shot_batches=1',
         '--one_shot_batch_size=50', '--tpu_iterations_per_loop=1',
         '--bootstrap_resamples=20', '--selection_samples=20')


@pytest.fixture(scope='module')
def search_dir(tmp_path_factory):
  config = tiny.tiny_config(tmp_path_factory.mktemp('search'), max_steps=4)
  runner.run_search(config, tiny.tiny_spec())
  return config.model_dir


def build(*args):
  flag_values = flags.FlagValues()
  cli.define_flags(flag_values)
  flag_values(['evaluate_search', *args])
  return cli.build_config(flag_values)


class Killed(Exception):
  """A simulated kill of the process."""


def files(root):
  return sorted(os.path.relpath(os.path.join(d, f), root)
                for d, _, names in os.walk(root) for f in names)


def test_sharded_killed_resumed_and_reported(search_dir, tmp_path, capsys):
  out = str(tmp_path / 'eval')
  args = (f'--search_model_dir={search_dir}', f'--output_dir={out}') + SMALL
  assert job.run(build(*args, '--shard=0/2')) is None
  plan = json.load(open(os.path.join(out, 'plan.json')))
  first, second = [c['id'] for c in plan['candidates']]
  assert first == 'searched-0-argmax' and second == 'random-00'
  assert 98800 <= plan['candidates'][1]['cost'] <= 101200
  # Shard 0 wrote only its own work: the first one-shot score and training.
  mine = files(out)
  assert f'one_shot/{first}.json' in mine
  assert f'results/{first}/run-0.json' in mine
  assert not any(second in f for f in mine)
  assert 'evaluation.json' not in mine
  with pytest.raises(Killed):  # Shard 1, killed in its training.
    job.run(build(*args, '--shard=1/2'), hooks=[faults.StopAt(1, Killed())])
  assert not os.path.exists(os.path.join(out, 'results', second))
  kept = open(os.path.join(out, 'results', first, 'run-0.json')).read()
  assert job.run(build(*args, '--shard=1/2')) is None  # Resumed.
  assert open(os.path.join(out, 'results', first, 'run-0.json')).read() == (
      kept)
  # The report as the tool's `main` makes it (test_bad_input_is_one_line_
  # and_writes_nothing runs the tool as a whole process).
  capsys.readouterr()
  one_process.run_main(cli, f'--output_dir={out}', '--report_only')
  printed = capsys.readouterr().out
  built = json.load(open(os.path.join(out, report.JSON_FILENAME)))
  assert built['progress'] == {'trainings_done': 2, 'trainings_total': 2,
                               'one_shot_done': 2, 'one_shot_total': 2}
  text = open(os.path.join(out, report.TEXT_FILENAME)).read()
  assert text == report.format_text(built) + '\n'
  assert report.format_text(built) in printed
  assert os.path.getsize(os.path.join(out, report.FIGURE_FILENAME)) > 5000
  for entry in built['candidates']:
    (run,) = entry['runs']
    assert run['global_step'] == 2 and run['validation_examples'] == 2000
    assert entry['validation']['mean'] == run['validation']
    assert 0 <= entry['test']['mean'] <= 1
    (score,) = entry['one_shot']
    assert 0 <= score <= 1 and score * 50 == pytest.approx(round(score * 50))
  (search,) = built['searches']
  assert search['candidate'] == first and search['rules'] == ['argmax']
  assert search['cost_error'] == pytest.approx(abs(
      built['candidates'][0]['cost'] - 1e5))
  versus = search['vs_random_validation']
  # The stored accuracy is a float32 (rounded at 2^-24 relative), the
  # compared value the exact count over 2,000 images.
  assert versus['of'] == 2 and versus['random_mean'] == pytest.approx(
      built['candidates'][1]['validation']['mean'], abs=1e-7)
  # Compared on integer counts of correct images, in the JSON per run.
  assert built['candidates'][1]['validation_correct'] == [
      round(built['candidates'][1]['validation']['mean'] * 2000)]
  assert 'verdict' in built['searched_vs_random']['argmax']['test']
  # The sizing tool reads a real evaluation dir: its budget, and that one
  # seed measures no noise yet (a rehearsal of the pilot on 2 steps).
  sizing = files_lib.load_script('bench', 'evaluation_sizing.py')
  assert sizing.main([f'--evaluation={out}']) == 0
  (pilot,) = json.loads(capsys.readouterr().out)['budgets']
  assert (pilot['train_steps'], pilot['train_batch_size']) == (2, 8)
  assert pilot['decisive'] is None and 'not measured' in pilot['note']
  assert 0 < search['settling']['entropy'] <= search['settling'][
      'uniform_entropy']


def _standalone_accuracy(search, indices, batch_size, num_batches):
  """The architecture built stand-alone (only its ops, its exact widths)
  from prefix slices of the search's caught-up shared weights, with
  batch-statistics BN: by docs/DESIGN.md "Masks" the network the supernet
  computes for it, built another way."""
  with tf.Graph().as_default():
    ds = data.ClassifierInputFn('embedded', None, 'validation', 28,
                                is_training=False)({'batch_size': batch_size})
    images, labels = tf1.data.make_one_shot_iterator(
        ds.take(num_batches)).get_next()
    logits = supernet.build_network(
        architecture.with_indices(search.spec, indices), images, 10,
        forms.standalone(is_training=True, batch_norm_mode='batch'))
    variables = tf1.global_variables()
    weights = warm_start.SearchWeights.open(search.model_dir, search.spec,
                                            10, 1)
    hits = tf.reduce_sum(tf.cast(tf.equal(
        tf.argmax(logits, -1, output_type=tf.int32), labels), tf.int32))
    with tf1.Session() as session:
      warm_start.scaffold_init_fn(weights.assignments(variables))(None,
                                                                  session)
      return sum(session.run(hits) for _ in range(num_batches)) / (
          batch_size * num_batches)


def test_one_shot_is_the_supernet_on_that_architecture(search_dir):
  search = job.plan_lib.load_search(search_dir)
  assert search.step_plan.width_form == 'sampled'  # A CPU search's 'auto'.
  # The search's own plan, and TuNAS's masked widths: one network.
  nets = [one_shot.Supernet(search.model_dir, search.config, plan)
          for plan in (search.step_plan, dataclasses.replace(
              search.step_plan, width_form='masked'))]
  architectures = (search.result.indices, [1, 1, 1, 1, 1, 0, 2])
  with one_shot.Scorer(search.spec, nets, batch_size=100,
                       num_batches=2) as scorer:
    scores = [scorer.accuracies(indices) for indices in architectures]
  for indices, (sampled, masked) in zip(architectures, scores):
    assert sampled == masked == _standalone_accuracy(search, indices, 100, 2)
  assert scores[0] != scores[1]
  assert one_shot.default_batch_size(search.config) == 16  # 4 x 4 images.


@pytest.mark.parametrize('flag, message', [
    ('--shard=2/2', r'--shard=2/2: expected i/n with 0 <= i < n'),
    ('--relative_window=0', 'a window of zero width is empty'),
    ('--seeds=0', 'seeds must be at least 1, got 0'),
    ('--min_cost=5', 'give both min_cost and max_cost, or neither'),
    ('--min_cost=5 --max_cost=5', 'empty cost window: min_cost 5.0 is not '
     'below max_cost 5.0'),
])
def test_bad_flags_are_one_line(search_dir, tmp_path, flag, message):
  with pytest.raises(cli.cli.UsageError, match=message):
    build(f'--search_model_dir={search_dir}',
          f'--output_dir={tmp_path / "eval"}', *flag.split())
  assert not os.path.exists(tmp_path / 'eval')


def _copy_with(search_dir, tmp_path, name, **changes):
  copy = str(tmp_path / name)
  shutil.copytree(search_dir, copy)
  path = os.path.join(copy, 'config.json')
  values = json.load(open(path))
  values.update(changes)
  json.dump(values, open(path, 'w'))
  return copy


def test_bad_input_is_one_line_and_writes_nothing(search_dir, tmp_path):
  out = tmp_path / 'eval'

  def refused(*args):
    with pytest.raises(EvaluationError) as e:
      job.run(build(f'--output_dir={out}', *SMALL, *args))
    assert not os.path.exists(out)
    return str(e.value)

  other = _copy_with(search_dir, tmp_path, 'other', rl_cost_model_target=2e5)
  assert refused(f'--search_model_dir={search_dir}',
                 f'--search_model_dir={other}') == (
      f'searches disagree on rl_cost_model_target: 100000.0 in {search_dir}, '
      f'200000.0 in {other}; evaluate searches of one space, dataset, cost '
      'model and target together')
  longer = _copy_with(search_dir, tmp_path, 'longer', max_steps=8)
  assert refused(f'--search_model_dir={longer}') == (
      f'search model dir {longer} is not finished (step 4 of 8); evaluate '
      'it once it is')
  assert refused('--search_model_dir=/nonexistent/search') == (
      'search model dir /nonexistent/search: model dir /nonexistent/search '
      'does not exist')
  # No architecture of the tiny space costs 99,990-100,010 MAdds.
  assert refused(f'--search_model_dir={search_dir}',
                 '--relative_window=0.0001', '--max_attempts=30').startswith(
      'random architectures in 9.999e+04-1e+05 madds: found 0 of 1 '
      'architectures costing [99990, 100010] madds in 30 attempts')
  bad = tmp_path / 'bad.txt'
  bad.write_text('0:1:0\n')
  assert refused(f'--search_model_dir={search_dir}',
                 f'--architectures_file={bad}').startswith(
      'extra architecture 1 (0:1:0): ')
  # The trainings' splits are checked before any work (train_eval's check).
  assert refused(f'--search_model_dir={search_dir}', '--use_tpu',
                 '--tpu=grpc://none', '--eval_batch_size=4096') == (
      'the validation split of embedded has 2000 examples; a TPU evaluates '
      'whole batches of eval_batch_size 4096, so it needs a known size of at '
      'least one batch')
  # As a user meets it: one line on stderr, exit 2, nothing written.
  done = subprocess.run(
      [sys.executable, TOOL, f'--output_dir={out}', *SMALL,
       f'--search_model_dir={search_dir}', f'--search_model_dir={other}'],
      capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S)
  assert done.returncode == 2
  assert done.stderr.splitlines() == [
      'evaluate_search.py: error: searches disagree on rl_cost_model_target'
      f': 100000.0 in {search_dir}, 200000.0 in {other}; evaluate searches '
      'of one space, dataset, cost model and target together']
  assert not os.path.exists(out)


def test_a_full_disk_in_a_training_is_one_line_and_exit_1(
    monkeypatch, tmp_path, capsys):
  # What train_eval raises when a save fails for lack of space
  # (tests/e2e/test_full_disk.py provokes it); its checkpoints stay.
  message = (f'no space left on the device of {tmp_path}/train/x/run-0; '
             'rerun once there is room')

  def full_disk(config, hooks=None):
    raise model_dir_lib.DiskFullError(message)
  monkeypatch.setattr(job, 'run', full_disk)
  flag_values = flags.FlagValues()
  cli.define_flags(flag_values)
  flag_values(['evaluate_search', '--search_model_dir=/s',
               f'--output_dir={tmp_path}'])
  with pytest.raises(SystemExit) as exited:
    cli.main(['evaluate_search'], flag_values)
  assert exited.value.code == 1
  (line,) = capsys.readouterr().err.splitlines()
  assert line.endswith(f': error: {message}')


def test_other_settings_in_an_output_dir_are_refused(search_dir, tmp_path):
  out = tmp_path / 'eval'
  args = (f'--search_model_dir={search_dir}', f'--output_dir={out}') + SMALL
  config, plan, _ = job.prepare(build(*args))
  before = files(out)
  with pytest.raises(EvaluationError, match=(
      r'holds an evaluation with num_random=1, not 2; use another')):
    job.prepare(build(*args, '--num_random=2'))
  assert files(out) == before
  # A rerun, another shard and the report agree on the plan.
  assert job.prepare(build(*args, '--shard=1/3'))[1] == plan
  assert job.prepare(build(f'--output_dir={out}', '--report_only'))[1] == plan
  assert config.seeds == 1 and len(plan.candidates) == 2
  with pytest.raises(EvaluationError, match='holds no evaluation to report'):
    job.prepare(build(f'--output_dir={tmp_path / "none"}', '--report_only'))


def test_the_default_recipe_is_the_searches_own_batch(search_dir, tmp_path):
  args = [a for a in SMALL if not a.startswith('--train_batch_size')]
  config, plan, searches = job.prepare(build(
      f'--search_model_dir={search_dir}', f'--output_dir={tmp_path}', *args))
  own = searches[0].config.train_batch_size
  assert config.train_batch_size == own != 4096
  line = job.describe_recipe(config, searches[0], plan.candidates[0])
  assert line.startswith(f"stand-alone recipe: batch {own} (the searches' "
                         f"own), image size {searches[0].config.image_size}")
  # The stored config holds the resolved batch; a rerun without the flag
  # agrees with it, one with another batch is refused.
  assert job.prepare(build(f'--search_model_dir={search_dir}',
                           f'--output_dir={tmp_path}', *args))[1] == plan
  with pytest.raises(EvaluationError, match='train_batch_size'):
    job.prepare(build(f'--search_model_dir={search_dir}',
                      f'--output_dir={tmp_path}', *args,
                      f'--train_batch_size={own + 1}'))


def test_reference_nets_are_checked(search_dir, tmp_path):
  with pytest.raises(cli.cli.UsageError, match=(
      r"unknown reference network 'nope'; valid: .*proxylessnas_mobile")):
    build('--search_model_dir=/s', '--output_dir=/tmp/x',
          '--reference_nets=nope')
  config = build('--search_model_dir=/s', '--output_dir=/tmp/x',
                 '--reference_nets=proxylessnas_mobile')
  ((name, space, arch),) = config.reference_nets
  assert (name, space) == ('proxylessnas_mobile', 'proxylessnas_search')
  # The tiny search did not search that space: refused, nothing written.
  with pytest.raises(EvaluationError, match=(
      "reference net 'proxylessnas_mobile' is an architecture of "
      'proxylessnas_search, not of the searched space')):
    job.prepare(build(f'--search_model_dir={search_dir}',
                      f'--output_dir={tmp_path / "ref"}', *SMALL,
                      '--reference_nets=proxylessnas_mobile'))
  assert not (tmp_path / 'ref').exists()


def test_an_explicit_window_replaces_the_relative_one(search_dir, tmp_path):
  # Only the tiny architectures of 100,672 MAdds lie in this window.
  _, plan, _ = job.prepare(build(
      f'--search_model_dir={search_dir}', f'--output_dir={tmp_path}', *SMALL,
      '--num_random=3', '--min_cost=100500', '--max_cost=101000'))
  assert plan.window == (100500.0, 101000.0)
  randoms = [c for c in plan.candidates if c.kind == 'random']
  assert [c.cost for c in randoms] == [100672.0] * 3
  assert plan.searches[0]['choices']['argmax']['window'] == [100500.0,
                                                            101000.0]


def test_trainings_share_an_architecture_and_alternate_seeds():
  c = job.candidates_lib.Candidate
  plan = job.Plan('tiny', 'madds', 'madds', 1e5, (1, 2), [], [
      c('searched-0-argmax', 'searched', '0:1', '', 1.0, 0, ('argmax',)),
      c('random-00', 'random', '0:1', '', 1.0),
      c('random-01', 'random', '1:1', '', 1.0)])
  config = build('--search_model_dir=/s', '--output_dir=/tmp/x', '--seeds=2')
  assert [(c.id, r) for c, r in job.trainings(plan, config)] == [
      ('searched-0-argmax', 0), ('random-01', 0), ('searched-0-argmax', 1),
      ('random-01', 1)]
  assert job.owners(plan)['random-00'].id == 'searched-0-argmax'
  assert np.array_equal([c.id for c in job.unique(plan)],
                        ['searched-0-argmax', 'random-01'])


# A MAdds target of the tiny space with two architectures within the
# default window (+-1.2%): 61,864 and 62,256.
RETARGET = 62000.0


def test_a_retarget_is_evaluated_as_a_search(search_dir, tmp_path):
  # bin/evaluate_search.py takes a retarget's model dir as a search.
  source = retarget.read_source(search_dir)
  model_dir = str(tmp_path / 'retarget')
  config = retarget.make_config(source, model_dir, [RETARGET], max_steps=4)
  retarget.run_retarget(config, source, [RETARGET])
  out = str(tmp_path / 'eval')
  returned = job.run(build(f'--search_model_dir={model_dir}',
                           f'--output_dir={out}', *SMALL))
  built = json.load(open(os.path.join(out, report.JSON_FILENAME)))
  assert returned['target'] == RETARGET and built['target'] == RETARGET
  (searched,) = built['searches']
  assert searched['candidate'] == 'searched-0-argmax'
  assert searched['cost_error'] == pytest.approx(abs(
      built['candidates'][0]['cost'] - RETARGET))
  for entry in built['candidates']:
    (score,) = entry['one_shot']
    assert 0 <= score <= 1
