#!/usr/bin/env python3
"""Does the search work? Searched against random architectures at equal cost.

  python bin/evaluate_search.py --search_model_dir=/tmp/s1 \\
      --search_model_dir=/tmp/s2 --output_dir=/tmp/eval --num_random=12 \\
      --train_batch_size=64 --train_steps=1000
  python bin/evaluate_search.py --output_dir=/tmp/eval --report_only
  python bin/evaluate_search.py ... --shard=0/4     # machine 1 of 4

Scores each search's final architecture, random architectures in the cost
window around the target and at each search's own cost, any
--reference_nets (each on its own row) and any --architectures_file, one-shot (with every supernet's inherited weights) and
stand-alone (trained from scratch, --seeds seeds each); writes
evaluation.json, evaluation.txt and evaluation.png to --output_dir
(docs/evaluate_search.md). Rerunning the same command continues where it
stopped; --report_only reports what is done.
"""

import os
import re
import sys

if __package__ in (None, ''):
  # Run as a file (python bin/search.py): the tools are package `bin` of the
  # source tree. Installed, they are package `tunas_search_cli`.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  __package__ = 'bin'  # pylint: disable=redefined-builtin

# pylint: disable=g-import-not-at-top,wrong-import-position
# First, before anything imports TensorFlow: keeps its start-up quiet.
from . import _quiet  # pylint: disable=unused-import
from absl import flags

from . import cli
from . import config_flags
import search_spaces
from tunas_search.space import architecture
from tunas_search.config import ConfigError
from tunas_search.evaluation import candidates
from tunas_search.config.evaluation import EvaluationConfig

_NOT_FLAGS = ('search_model_dirs', 'extra_architectures', 'reference_nets',
              'shard_index', 'num_shards')
CONFIG_FLAGS = config_flags.ConfigFlags(EvaluationConfig, _NOT_FLAGS)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines this tool's flags (called by `run()`)."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_multi_string(
      'search_model_dir', [], 'A finished search to evaluate (repeat for '
      'several searches of one space, dataset, cost model and target).', **fv)
  flags.DEFINE_string('architectures_file', None, 'Also evaluate these '
                      'architecture strings, one per line (# comments).',
                      **fv)
  flags.DEFINE_list(
      'reference_nets', [], 'Registered reference networks of the searched '
      'space to train beside the random ones, each reported on its own row '
      '(e.g. proxylessnas_mobile: 84.4 ms on the Pixel-1 model).', **fv)
  flags.DEFINE_string('shard', '0/1', 'i/n: do every n-th one-shot score '
                      'and training, starting at the i-th (0 <= i < n), '
                      'e.g. one shard per machine.', **fv)
  CONFIG_FLAGS.define(flag_values)


def parse_shard(text: str):
  """'i/n' -> (i, n).

  Raises:
    cli.UsageError: unless 0 <= i < n.
  """
  match = re.fullmatch(r'(\d+)/(\d+)', text.strip())
  if not match or not int(match.group(1)) < int(match.group(2)):
    raise cli.UsageError(f'--shard={text}: expected i/n with 0 <= i < n, '
                         'e.g. 0/1 (everything) or 2/4')
  return int(match.group(1)), int(match.group(2))


def _extra(path):
  if not path:
    return ()
  try:
    with open(path, encoding='utf-8') as f:
      return candidates.architecture_lines(f.read())
  except (OSError, UnicodeDecodeError) as e:
    raise cli.UsageError(f'--architectures_file={path}: cannot read it: '
                         f'{getattr(e, "strerror", None) or e}') from None


def reference_nets(names):
  """(name, space, architecture) of each registered reference network.

  Raises:
    cli.UsageError: naming one that is not a registered reference network,
      with the valid names.
  """
  valid = [n for n in search_spaces.names() if search_spaces.get(n).is_reference]
  out = []
  for name in names:
    if name not in valid:
      raise cli.UsageError(f'--reference_nets: unknown reference network '
                           f'{name!r}; valid: {", ".join(valid)}')
    reference = search_spaces.get(name)
    # The searchable space it prunes: the one built by the same function.
    space = next((n for n in search_spaces.names()
                  if not search_spaces.get(n).is_reference
                  and search_spaces.get(n).spec_fn is reference.spec_fn),
                 name)
    out.append((name, space,
                architecture.format_indices(reference.default_indices())))
  return tuple(out)


def build_config(f: flags.FlagValues = flags.FLAGS) -> EvaluationConfig:
  """The validated config of the flags.

  Raises:
    cli.UsageError: for any bad value, with one line naming it.
  """
  if not f.output_dir:
    raise cli.UsageError('--output_dir is required')
  cli.check_output_dir('output_dir', f.output_dir)
  shard, shards = parse_shard(f.shard)
  extra = _extra(f.architectures_file)
  if f.architectures_file and not extra:
    raise cli.UsageError(f'--architectures_file={f.architectures_file} '
                         'lists no architecture')
  try:
    return EvaluationConfig(
        **CONFIG_FLAGS.values(f), search_model_dirs=tuple(f.search_model_dir),
        extra_architectures=extra,
        reference_nets=reference_nets(f.reference_nets), shard_index=shard, num_shards=shards)
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None


def main(argv, flag_values: flags.FlagValues = flags.FLAGS):
  """Runs this shard of the evaluation; prints the report."""
  if len(argv) > 1:
    raise cli.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = build_config(flag_values)
  # TensorFlow-heavy modules only once the flags are known to be good.
  # pylint: disable=g-import-not-at-top
  from tunas_search.runtime import model_dir as model_dir_lib
  from tunas_search.evaluation import job
  from tunas_search.evaluation import report
  # pylint: enable=g-import-not-at-top
  try:
    built = job.run(config)
  except job.EvaluationError as e:
    raise cli.UsageError(str(e)) from None
  except model_dir_lib.DiskFullError as e:  # A training's; it resumes.
    cli.fail(str(e), exit_code=cli.FAILURE_EXIT_CODE)
  if built is None:
    print(f'Shard {config.shard_index}/{config.num_shards} done; report: '
          f'{sys.argv[0]} --output_dir={config.output_dir} --report_only')
  else:
    print(report.format_text(built))
    print(f'\nWritten to {config.output_dir}: {report.JSON_FILENAME}, '
          f'{report.TEXT_FILENAME}, {report.FIGURE_FILENAME}')


def run():
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
