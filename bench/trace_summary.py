#!/usr/bin/env python3
"""Where one traced session step's time went; prints one JSON object.

  .venv/bin/python bench/trace_summary.py RUN_METADATA [--top 10]

RUN_METADATA is a `tf.compat.v1.RunMetadata`, serialised (`.pb`, or gzipped
`.pb.gz`), of a step run with a software trace and its partition graphs, as
`bench/search_step.py --trace_dir` writes them. A software trace times each
op that ran on the host's executor (a dead op is not recorded); for an op on
a GPU that is its launch, not its kernel: what bounds a step whose GPU is
idle, as the search step's was on an H100 (docs/benchmarks.md, "GPU,
2026-11-26 (second)"), and what the trace can show without CUPTI, which the
GPU bundle leaves out.

Keys:
  step_ms: first op start to last op end, over every device.
  nodes: ops recorded (the live ones; a function body's once per call);
    op_ms: their summed durations;
    parallelism: op_ms / step_ms (the executor threads busy on average).
  devices: per device, nodes, op_ms, busy_ms (the time at least one of its
    ops ran) and threads.
  ops: the --top op types by summed duration: op, count, ms.
  transfers: the _Send/_Recv ops between devices: count, ms.
  critical_path: the chain that ended the step, followed back from the op
    that ended last through, at each op, the input (data or control; a
    _Recv's is its _Send) that ended last: nodes, op_ms (the chain's ops
    running), wait_ms (the gaps between an input's end and its consumer's
    start: the executor's scheduling), and its --top op types. Where
    wait_ms is large against op_ms, the step is bound by running the graph,
    not by its ops.
"""

import argparse
import collections
import gzip
import json
import os
import sys
from typing import Any, Dict, List, NamedTuple, Sequence

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf
from google.protobuf import message

_TRANSFERS = ('_Send', '_Recv', '_HostSend', '_HostRecv')


class Record(NamedTuple):
  """One recorded op: its node, op type, device, thread and times (ns)."""
  name: str
  op: str
  device: str
  thread: int
  start: int
  end: int


def read(path: str) -> tf.compat.v1.RunMetadata:
  """The RunMetadata serialised at `path` (gzipped if it ends in .gz)."""
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as f:
    meta = tf.compat.v1.RunMetadata()
    meta.ParseFromString(f.read())
  return meta


def write(meta: tf.compat.v1.RunMetadata, path: str,
          max_const_bytes: int = 1024) -> None:
  """Writes `meta` gzipped to `path`, through a temporary name.

  The values of the partition graphs' constants over `max_const_bytes` are
  dropped (their dtype and shape stay): the summary needs none, and the
  benchmark's constant image batches were most of a file (an inference
  step's 3.4 MB; a GPU lease brings back 16 MiB a file).
  """
  meta = type(meta).FromString(meta.SerializeToString())
  for g in meta.partition_graphs:
    for n in g.node:
      value = n.attr['value'].tensor if n.op == 'Const' else None
      if value is not None and value.ByteSize() > max_const_bytes:
        value.ClearField('tensor_content')
        for field in ('float_val', 'double_val', 'int_val', 'int64_val',
                      'half_val', 'bool_val', 'string_val'):
          value.ClearField(field)
  with gzip.open(path + '.tmp', 'wb') as f:
    f.write(meta.SerializeToString())
  os.replace(path + '.tmp', path)


def _label_op(label: str) -> str:
  # A timeline label reads 'name = OpType(inputs)'.
  _, _, rest = label.partition(' = ')
  return rest.partition('(')[0] or '?'


def records(meta: tf.compat.v1.RunMetadata) -> List[Record]:
  """Every op the executor recorded, in the trace's order.

  Times come from nanoseconds where the trace has them. An op inside a
  function body is recorded once per call, under its name in the body. A
  full trace's GPU rows (devices '.../stream:N' and '.../memcpy', from
  CUPTI) time kernels, not the executor's ops, under the same names: they
  are left out.
  """
  ops = {n.name: n.op for g in meta.partition_graphs for n in g.node}
  out = []
  for dev in meta.step_stats.dev_stats:
    if '/stream:' in dev.device or dev.device.endswith('/memcpy'):
      continue
    for s in dev.node_stats:
      start = s.all_start_nanos or s.all_start_micros * 1000
      length = s.all_end_rel_nanos or s.all_end_rel_micros * 1000
      name = s.node_name.split(':')[0]
      out.append(Record(name, ops.get(name) or _label_op(s.timeline_label),
                        dev.device, s.thread_id, start, start + length))
  return out


def inputs(meta: tf.compat.v1.RunMetadata) -> Dict[str, List[str]]:
  """Each node's data and control inputs by name; a _Recv's is its _Send."""
  sends = {}
  for g in meta.partition_graphs:
    for n in g.node:
      if n.op in ('_Send', '_HostSend'):
        sends[n.attr['tensor_name'].s] = n.name
  out = {}
  for g in meta.partition_graphs:
    for n in g.node:
      names = [i.lstrip('^').split(':')[0] for i in n.input]
      if n.op in ('_Recv', '_HostRecv'):
        send = sends.get(n.attr['tensor_name'].s)
        names += [send] if send else []
      out[n.name] = names
  return out


def _union_ns(intervals) -> int:
  """Total length of the union of (start, end) intervals."""
  total, end = 0, None
  for s, e in sorted(intervals):
    if end is None or s > end:
      total, end = total + e - s, e
    elif e > end:
      total, end = total + e - end, e
  return total


def _by_op(chain, top: int) -> List[Dict[str, Any]]:
  count, ns = collections.Counter(), collections.Counter()
  for r in chain:
    count[r.op] += 1
    ns[r.op] += r.end - r.start
  return [{'op': op, 'count': count[op], 'ms': round(t / 1e6, 3)}
          for op, t in sorted(ns.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def critical_path(rs: Sequence[Record],
                  edges: Dict[str, List[str]]) -> List[Record]:
  """The chain ending at the last op to end, in execution order.

  From the op that ended last, steps at each op to its recorded input that
  ended last (ties: the first in input order), until an op has none. Only
  the partition graphs' ops (those in `edges`) are on it: the ops of a
  function body run inside their call, which is.
  """
  recorded = {r.name: r for r in rs if r.name in edges}
  if not recorded:
    return []
  node = max(recorded.values(), key=lambda r: (r.end, r.name))
  chain, seen = [node], {node.name}
  while True:
    preds = [recorded[i] for i in edges.get(node.name, ())
             if i in recorded and i not in seen]
    if not preds:
      break
    node = max(preds, key=lambda r: r.end)  # max keeps the first of a tie.
    chain.append(node)
    seen.add(node.name)
  return chain[::-1]


def summarize(meta: tf.compat.v1.RunMetadata, top: int = 10
              ) -> Dict[str, Any]:
  """The keys of the module docstring for one traced step."""
  rs = records(meta)
  if not rs:
    raise ValueError('the trace records no op: was the step run with '
                     'trace_level=SOFTWARE_TRACE or FULL_TRACE?')
  step_ns = max(r.end for r in rs) - min(r.start for r in rs)
  op_ns = sum(r.end - r.start for r in rs)
  devices = {}
  for device in sorted({r.device for r in rs}):
    mine = [r for r in rs if r.device == device]
    devices[device] = {
        'nodes': len(mine),
        'op_ms': round(sum(r.end - r.start for r in mine) / 1e6, 3),
        'busy_ms': round(_union_ns((r.start, r.end) for r in mine) / 1e6, 3),
        'threads': len({r.thread for r in mine})}
  moves = [r for r in rs if r.op in _TRANSFERS]
  chain = critical_path(rs, inputs(meta))
  waits = [max(0, b.start - a.end) for a, b in zip(chain, chain[1:])]
  return {
      'step_ms': round(step_ns / 1e6, 3),
      'nodes': len(rs),
      'op_ms': round(op_ns / 1e6, 3),
      'parallelism': round(op_ns / step_ns, 3) if step_ns else None,
      'devices': devices,
      'ops': _by_op(rs, top),
      'transfers': {'count': len(moves), 'ms': round(
          sum(r.end - r.start for r in moves) / 1e6, 3)},
      'critical_path': {
          'nodes': len(chain),
          'op_ms': round(sum(r.end - r.start for r in chain) / 1e6, 3),
          'wait_ms': round(sum(waits) / 1e6, 3),
          'ops': _by_op(chain, top)},
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('run_metadata', help='a RunMetadata .pb or .pb.gz')
  parser.add_argument('--top', type=int, default=10,
                      help='op types listed (at least 1)')
  args = parser.parse_args(argv)
  if args.top < 1:
    parser.error(f'--top {args.top} is below 1')
  try:
    meta = read(args.run_metadata)
    summary = summarize(meta, args.top)
  except (OSError, ValueError, message.DecodeError) as e:
    print(f'trace_summary.py: {args.run_metadata}: {e}', file=sys.stderr)
    return 2
  print(json.dumps(summary, indent=2))
  return 0


if __name__ == '__main__':
  sys.exit(main())
