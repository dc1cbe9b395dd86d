"""A user's images end to end: folder:PATH and tfrecord:PATTERN.

A folder of generated PNGs in 3 classes (examples/make_image_folder.py)
is searched and its winner trained and evaluated on the folder's test/
split by the tools, as a user runs them; bad folders fail with one line
naming the path, exit code 2.
"""

import json
import os
import shutil

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from bin import cli
from bin import train_eval as train_eval_cli
from examples import make_image_folder
from tests.e2e.test_user_spaces import TUTORIAL_SPACE
from tests.e2e.test_user_spaces import analyze_tutorial_search
from tests.e2e.test_user_spaces import describe_and_sample_tutorial_space
from tests.e2e.test_user_spaces import ok
from tests.e2e.test_user_spaces import run_tool
from tests.bin.test_quiet_errors import assert_one_line_error
from tunas_search import data
from tunas_search.data import folder as folder_lib
from tunas_search.data import tfrecord as tfrecord_lib

CLASSES = list(make_image_folder.CLASSES)
TRAIN_PER_CLASS, TEST_PER_CLASS = 100, 20


def _write(root, train_per_class=TRAIN_PER_CLASS, test_per_class=0, seed=0):
  rng = np.random.default_rng(seed)
  make_image_folder.write_split(str(root), train_per_class, 32, rng)
  if test_per_class:
    make_image_folder.write_split(str(root / 'test'), test_per_class, 32, rng)
  return root


@pytest.fixture(scope='module')
def shapes(tmp_path_factory):
  """360 PNGs: 100 training and 20 test images of each of 3 classes."""
  return _write(tmp_path_factory.mktemp('shapes'), test_per_class=20)


def test_folder_info(shapes):
  info = data.get_info(f'folder:{shapes}')
  assert info.class_names == tuple(CLASSES)
  assert (info.num_classes, info.channels, info.default_image_size) == (
      3, 3, 32)
  # 10% of the 300 training images are held out for the controller.
  assert (info.num_train, info.num_validation, info.num_test) == (270, 30, 60)
  assert info.augmentation == data.base.LIGHT


def test_folder_splits_are_disjoint_and_labelled_by_folder(shapes):
  source = data.get_source(f'folder:{shapes}')
  train = source.files('train')
  validation = source.files('validation')
  assert not {p for p, _ in train} & {p for p, _ in validation}
  for path, label in train + validation + source.files('test'):
    assert os.path.basename(os.path.dirname(path)) == CLASSES[label]
  images, labels = next(iter(source.examples('test').batch(60)))
  assert images.shape == (60, 32, 32, 3) and images.dtype == tf.uint8
  assert sorted(set(labels.numpy().tolist())) == [0, 1, 2]


def test_a_validation_folder_replaces_the_held_out_images(tmp_path):
  root = _write(tmp_path / 'f', train_per_class=4)
  _write(root / 'validation', train_per_class=2, seed=1)
  info = data.get_info(f'folder:{root}')
  assert (info.num_train, info.num_validation, info.num_test) == (12, 6, None)


@pytest.mark.parametrize('damage, message', [
    (lambda r: [os.remove(p) for p in (r / 'disk').iterdir()],
     'class folder {root}/disk has no images'),
    (lambda r: (r / 'disk' / '0001.png').write_bytes(b'no image'),
     'unreadable image {root}/disk/0001.png: not a PNG or JPEG image'),
    (lambda r: shutil.rmtree(r / 'test' / 'vstripes'),
     'image folder {root}/test has no folder for class(es) vstripes'),
    (lambda r: [shutil.rmtree(r / c) for c in CLASSES],
     'image folder {root} has no class folders'),
])
def test_bad_folders_are_one_line_data_errors(tmp_path, damage, message):
  root = _write(tmp_path / 'f', train_per_class=3, test_per_class=1)
  damage(root)
  with pytest.raises(data.DataError) as raised:
    folder_lib.FolderSource(f'folder:{root}')
  assert message.format(root=root) in str(raised.value)


def _search_folder(shapes, search_dir):
  """A 6-step search of the tutorial space on the folder; its output.

  Its config.json takes the classes, channels and resolution of the folder.
  """
  out = ok(run_tool('search', f'--search_space={TUTORIAL_SPACE}',
                    f'--dataset=folder:{shapes}', f'--model_dir={search_dir}',
                    '--train_batch_size=16', '--max_steps=6',
                    '--tpu_iterations_per_loop=3',
                    '--rl_cost_model_target=1.5e6', '--seed=1'))
  assert 'Search at step 6' in out
  with open(search_dir / 'config.json') as f:
    config = json.load(f)
  assert config['class_names'] == CLASSES
  assert (config['num_classes'], config['input_channels'],
          config['image_size']) == (3, 3, 32)
  return out


def test_module_function_space_on_a_folder_in_every_tool(shapes, tmp_path):
  # The fast variant of test_folder_search_and_train_eval below and of
  # tests/e2e/test_user_spaces.py's test_module_function_in_every_tool: the
  # tutorial's MODULE:FUNCTION space in every tool, its search and
  # train_eval on the folder, one process per tool.
  samples = describe_and_sample_tutorial_space()
  search_dir = tmp_path / 'search'
  out = _search_folder(shapes, search_dir)
  assert 'madds=' in out and 'pixel1' not in out
  analyze_tutorial_search(search_dir)
  result = json.loads(ok(run_tool(
      'train_eval', f'--search_space={TUTORIAL_SPACE}',
      f'--indices={samples[0]["architecture"]}', f'--dataset=folder:{shapes}',
      f'--model_dir={tmp_path / "final"}', '--train_batch_size=16',
      '--eval_batch_size=20', '--max_steps=6', '--format=json')))
  assert result['architecture'] == samples[0]['architecture']
  assert result['split'] == 'test' and result['num_examples'] == 60


# Two processes more than the test above, which covers it with
# tests/e2e/test_after_search.py's
# test_cli_takes_the_final_architecture_of_a_search (train_eval takes the
# dataset and resolution from --search_model_dir's search).
@pytest.mark.slow
def test_folder_search_and_train_eval(shapes, tmp_path):
  search_dir = tmp_path / 'search'
  _search_folder(shapes, search_dir)
  result = json.loads(ok(run_tool(
      'train_eval', f'--search_model_dir={search_dir}',
      f'--model_dir={tmp_path / "final"}', '--train_batch_size=16',
      '--eval_batch_size=20', '--max_steps=6', '--format=json')))
  assert result['split'] == 'test' and result['num_examples'] == 60


def test_corrupt_image_met_while_streaming_is_named(tmp_path):
  root = _write(tmp_path / 'f', train_per_class=4)
  bad = root / 'hstripes' / '0002.png'
  bad.write_bytes(bad.read_bytes()[:60])  # A whole header, no image data.
  done = run_tool('search', f'--search_space={TUTORIAL_SPACE}',
                  f'--dataset=folder:{root}',
                  f'--model_dir={tmp_path / "search"}',
                  '--train_batch_size=4', '--max_steps=2',
                  '--rl_cost_model_target=1.5e6', '--seed=1')
  # After the search's own progress lines, the error is one line.
  assert done.returncode == 2, done.stderr[-3000:]
  assert 'Traceback' not in done.stderr
  errors = [l for l in done.stderr.splitlines() if 'error' in l.lower()]
  assert errors == [done.stderr.splitlines()[-1]]
  assert errors[0].startswith(f'search.py: error: unreadable image {bad}: ')


def test_empty_class_stops_the_search_before_writing(tmp_path):
  root = _write(tmp_path / 'f', train_per_class=3)
  for path in (root / 'vstripes').iterdir():
    path.unlink()
  done = run_tool('search', f'--search_space={TUTORIAL_SPACE}',
                  f'--dataset=folder:{root}',
                  f'--model_dir={tmp_path / "search"}', '--max_steps=2',
                  '--rl_cost_model_target=1.5e6')
  assert_one_line_error(done, 'search',
                        f'class folder {root}/vstripes has no images')
  assert not (tmp_path / 'search').exists()


def _example(png, label):
  return tf.train.Example(features=tf.train.Features(feature={
      tfrecord_lib.IMAGE_KEY: tf.train.Feature(
          bytes_list=tf.train.BytesList(value=[png])),
      tfrecord_lib.LABEL_KEY: tf.train.Feature(
          int64_list=tf.train.Int64List(value=[label]))})).SerializeToString()


def test_tfrecords_with_split_files(tmp_path):
  rng = np.random.default_rng(0)
  for split, count in (('train', 20), ('test', 6)):
    with tf.io.TFRecordWriter(str(tmp_path / f'{split}-00000.tfrecord')) as w:
      for i in range(count):
        label = i % 3
        w.write(_example(make_image_folder.png_bytes(
            make_image_folder.draw(label, 32, rng)), label))
  name = f'tfrecord:{tmp_path}/{{split}}-*.tfrecord'
  info = data.get_info(name)
  assert (info.num_classes, info.channels, info.default_image_size) == (
      3, 3, 32)
  assert (info.num_train, info.num_validation, info.num_test) == (18, 2, 6)
  source = data.get_source(name)
  held_out = list(source.examples('validation').as_numpy_iterator())
  train = list(source.examples('train').as_numpy_iterator())
  assert [l for _, l in held_out + train] == [i % 3 for i in range(20)]
  images, _ = next(iter(source.examples('test').batch(6)))
  assert images.shape == (6, 32, 32, 3)
  fn = data.ClassifierInputFn(name, None, 'train', 32, is_training=True,
                              seed=0)
  images, labels = next(iter(fn({'batch_size': 4})))
  assert images.shape == (4, 32, 32, 3) and labels.dtype == tf.int32


def test_train_eval_without_a_test_folder_is_refused_before_training(
    tmp_path):
  # The default --eval_split=test on a folder without test/: one line before
  # anything is trained or written, naming the splits there are and the flag.
  root = _write(tmp_path / 'f', train_per_class=3)
  model_dir = tmp_path / 'final'
  flag_values = flags.FlagValues()
  train_eval_cli.define_flags(flag_values)
  flag_values(['train_eval.py', '--search_space=proxylessnas_mobile',
               f'--dataset=folder:{root}', f'--model_dir={model_dir}',
               '--max_steps=2'])
  with pytest.raises(cli.UsageError) as raised:
    train_eval_cli.main(['train_eval.py'], flag_values)
  assert str(raised.value) == (
      f'train_and_eval reads train and test: folder:{root} has no test split '
      '(its splits: train, validation, train_full); add a '
      f'{root}/test folder with the same class folders, or evaluate on '
      'validation (--eval_split=validation)')
  assert not model_dir.exists()
