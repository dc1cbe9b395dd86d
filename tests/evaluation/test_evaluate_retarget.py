"""bin/evaluate_search.py takes a retarget's model dir as a search."""

import json
import os

import pytest
from absl import flags

from bin import evaluate_search as cli
from tests.e2e import tiny
from tunas_search.evaluation import job
from tunas_search.evaluation import report
from tunas_search.search import retarget
from tunas_search.search import runner

# The cheapest evaluation (tests/evaluation/test_evaluate_search.py): the
# retarget's argmax and one random architecture in its window, one seed of
# two training steps each.
SMALL = ('--final_architecture=argmax', '--num_random=1',
         '--num_random_own_cost=0', '--seeds=1', '--train_batch_size=8',
         '--train_steps=2', '--eval_batch_size=1000', '--one_shot_batches=1',
         '--one_shot_batch_size=50', '--tpu_iterations_per_loop=1',
         '--bootstrap_resamples=20', '--selection_samples=20')
# A MAdds target of the tiny space with two architectures within the
# default window (+-1.2%): 61,864 and 62,256.
TARGET = 62000.0


def build(*args):
  flag_values = flags.FlagValues()
  cli.define_flags(flag_values)
  flag_values(['evaluate_search', *args])
  return cli.build_config(flag_values)


def test_a_retarget_is_evaluated_as_a_search(tmp_path):
  source_dir = str(tmp_path / 'search')
  runner.run_search(tiny.tiny_config(source_dir, max_steps=4),
                    tiny.tiny_spec())
  source = retarget.read_source(source_dir)
  model_dir = str(tmp_path / 'retarget')
  config = retarget.make_config(source, model_dir, [TARGET], max_steps=4)
  retarget.run_retarget(config, source, [TARGET])
  out = str(tmp_path / 'eval')
  returned = job.run(build(f'--search_model_dir={model_dir}',
                           f'--output_dir={out}', *SMALL))
  built = json.load(open(os.path.join(out, report.JSON_FILENAME)))
  assert returned['target'] == TARGET and built['target'] == TARGET
  (searched,) = built['searches']
  assert searched['candidate'] == 'searched-0-argmax'
  assert searched['cost_error'] == pytest.approx(abs(
      built['candidates'][0]['cost'] - TARGET))
  for entry in built['candidates']:
    (score,) = entry['one_shot']
    assert 0 <= score <= 1
