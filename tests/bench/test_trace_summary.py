"""Tests of bench/trace_summary.py on traces made to order, and of
search_step.py's traced run on a small graph."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tests import files

tf1 = tf.compat.v1
CPU = '/job:localhost/replica:0/task:0/device:CPU:0'
GPU = '/job:localhost/replica:0/task:0/device:GPU:0'


@pytest.fixture(scope='module')
def summary():
  return files.load_script('bench', 'trace_summary.py')


def _node(graph, name, op, inputs=(), tensor_name=None):
  node = graph.node.add(name=name, op=op)
  node.input.extend(inputs)
  if tensor_name:
    node.attr['tensor_name'].s = tensor_name
  return node


def _stat(dev, name, start_us, end_us, thread=1, nanos=True):
  s = dev.node_stats.add(node_name=name, thread_id=thread,
                         timeline_label=f'{name} = Op()')
  if nanos:
    s.all_start_nanos = start_us * 1000
    s.all_end_rel_nanos = (end_us - start_us) * 1000
  else:
    s.all_start_micros = start_us
    s.all_end_rel_micros = end_us - start_us


def _two_device_trace():
  """A CPU graph sending c to a GPU graph; times in microseconds.

  Critical path, back from e (ends last): e <- r <- s (same tensor_name)
  <- c <- d (c's control input, which ends after its data input b).
  """
  meta = tf1.RunMetadata()
  cpu = meta.partition_graphs.add()
  _node(cpu, 'a', 'Const')
  _node(cpu, 'b', 'Conv2D', ['a'])
  _node(cpu, 'c', 'Relu', ['b:0', '^d'])
  _node(cpu, 'd', 'NoOp')
  _node(cpu, 's', '_Send', ['c'], tensor_name=b'edge_c')
  gpu = meta.partition_graphs.add()
  _node(gpu, 'r', '_Recv', tensor_name=b'edge_c')
  _node(gpu, 'e', 'Identity', ['r'])
  _node(gpu, 'dead', 'Relu', ['r'])  # Dead: not recorded.
  dev = meta.step_stats.dev_stats.add(device=CPU)
  for name, start, end, thread in (('a', 0, 10, 1), ('b', 12, 40, 1),
                                   ('d', 5, 45, 2), ('c', 50, 60, 1),
                                   ('s', 61, 62, 1)):
    _stat(dev, name, start, end, thread)
  dev = meta.step_stats.dev_stats.add(device=GPU)
  _stat(dev, 'r', 70, 71)
  _stat(dev, 'e', 80, 90, nanos=False)
  # A full trace's kernel row for b (CUPTI): not an executor op.
  _stat(meta.step_stats.dev_stats.add(device=GPU + '/stream:all'), 'b',
        100, 200)
  return meta


def test_the_critical_path_follows_the_input_that_ended_last(summary):
  meta = _two_device_trace()
  chain = summary.critical_path(summary.records(meta), summary.inputs(meta))
  assert [r.name for r in chain] == ['d', 'c', 's', 'r', 'e']
  path = summary.summarize(meta)['critical_path']
  # Ops: d 40 + c 10 + s 1 + r 1 + e 10 us; waits: 5 + 1 + 8 + 9 us.
  assert path['nodes'] == 5
  assert path['op_ms'] == 0.062
  assert path['wait_ms'] == 0.023


def test_step_devices_ops_and_transfers(summary):
  s = summary.summarize(_two_device_trace(), top=3)
  assert s['step_ms'] == 0.09
  assert s['nodes'] == 7
  assert s['op_ms'] == 0.1
  assert s['parallelism'] == round(100 / 90, 3)
  assert s['devices'] == {
      # Busy: [0, 45] + [50, 60] + [61, 62] us, overlaps counted once.
      CPU: {'nodes': 5, 'op_ms': 0.089, 'busy_ms': 0.056, 'threads': 2},
      GPU: {'nodes': 2, 'op_ms': 0.011, 'busy_ms': 0.011, 'threads': 1}}
  # Longest first; the 10-us ties by name.
  assert s['ops'] == [{'op': 'NoOp', 'count': 1, 'ms': 0.04},
                      {'op': 'Conv2D', 'count': 1, 'ms': 0.028},
                      {'op': 'Const', 'count': 1, 'ms': 0.01}]
  assert s['transfers'] == {'count': 2, 'ms': 0.002}


def test_a_function_body_op_counts_once_per_call_off_the_path(summary):
  meta = _two_device_trace()
  dev = meta.step_stats.dev_stats[0]
  # Two calls of a body holding 'apply' (not a partition graph node), the
  # second ending after every other op.
  _stat(dev, 'apply', 20, 30)
  _stat(dev, 'apply', 95, 99)
  s = summary.summarize(meta)
  assert s['nodes'] == 9
  assert s['op_ms'] == 0.114
  assert {'op': 'Op', 'count': 2, 'ms': 0.014} in s['ops']
  assert s['critical_path']['nodes'] == 5  # Still ends at e.
  assert s['step_ms'] == 0.099


def test_an_op_missing_from_the_graphs_takes_its_label(summary):
  meta = tf1.RunMetadata()
  dev = meta.step_stats.dev_stats.add(device=CPU)
  dev.node_stats.add(node_name='x', all_start_micros=1, all_end_rel_micros=2,
                     timeline_label='x = MatMul(a, b)')
  assert [r.op for r in summary.records(meta)] == ['MatMul']


def test_a_trace_without_ops_is_refused(summary):
  with pytest.raises(ValueError, match='records no op'):
    summary.summarize(tf1.RunMetadata())


def test_written_traces_drop_large_constants_only(summary, tmp_path):
  meta = _two_device_trace()
  big = meta.partition_graphs[0].node.add(name='images', op='Const')
  big.attr['value'].tensor.CopyFrom(
      tf.make_tensor_proto(np.ones((16, 16, 3), np.float32)))
  small = meta.partition_graphs[0].node.add(name='k', op='Const')
  small.attr['value'].tensor.CopyFrom(tf.make_tensor_proto(np.float32(2)))
  path = str(tmp_path / 'step.pb.gz')
  summary.write(meta, path)
  back = summary.read(path)
  nodes = {n.name: n for n in back.partition_graphs[0].node}
  assert not nodes['images'].attr['value'].tensor.tensor_content
  assert [d.size for d in nodes['images'].attr['value'].tensor.tensor_shape
          .dim] == [16, 16, 3]
  assert tf.make_ndarray(nodes['k'].attr['value'].tensor) == 2
  assert summary.summarize(back) == summary.summarize(meta)
  # The caller's trace is left whole.
  assert big.attr['value'].tensor.tensor_content
  assert not (tmp_path / 'step.pb.gz.tmp').exists()


def test_the_command_prints_json_and_refuses_bad_input(summary, tmp_path,
                                                       capsys):
  path = str(tmp_path / 'step.pb')
  with open(path, 'wb') as f:
    f.write(_two_device_trace().SerializeToString())
  assert summary.main([path, '--top', '1']) == 0
  printed = json.loads(capsys.readouterr().out)
  assert printed['ops'] == [{'op': 'NoOp', 'count': 1, 'ms': 0.04}]
  bad = tmp_path / 'bad.pb'
  bad.write_bytes(b'\xff' * 7)
  assert summary.main([str(bad)]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f'trace_summary.py: {bad}: ') and '\n' not in err
  with pytest.raises(SystemExit):
    summary.main([path, '--top', '0'])
  assert '--top 0 is below 1' in capsys.readouterr().err


def test_search_step_traces_the_live_ops_of_a_run(tmp_path):
  search_step = files.load_script('bench', 'search_step.py')
  graph = tf.Graph()
  with graph.as_default():
    # Variables, so that Grappler folds neither the Switch nor its branches.
    x = tf1.Variable([[1.0, 2.0]], use_resource=True)
    pred = tf1.Variable(True, use_resource=True)
    if_false, if_true = tf.raw_ops.Switch(data=x.read_value(),
                                          pred=pred.read_value())
    dead = tf.nn.relu(if_false, name='dead')
    live = tf.multiply(if_true, x.read_value(), name='live')
    out = tf.raw_ops.Merge(inputs=[dead, live]).output
    session = tf1.Session(graph=graph)
    session.run(tf1.global_variables_initializer())
  path = str(tmp_path / 'out.run_metadata.pb.gz')
  s = search_step.trace(session, out, path)
  meta = search_step.trace_summary.read(path)
  names = {r.name for r in search_step.trace_summary.records(meta)}
  # The dead op is in the graph the step ran, but no op ran for it.
  assert 'dead' in {n.name for g in meta.partition_graphs for n in g.node}
  assert 'live' in names and 'dead' not in names
  assert s['nodes'] == len(names)
  assert s['critical_path']['nodes'] >= 3
