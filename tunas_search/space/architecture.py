"""Architecture strings: one choice index per decision, and pruning a space.

An architecture string holds one integer per decision of a space, in
traversal order, joined by colons: `0:2:1:...` (docs/method.md section 1). Decisions
nested under an unselected choice still get an index; it is ignored when
building and canonically 0 (docs/cost_models.md).
"""

from typing import Any, List, Optional, Sequence

import numpy as np

from tunas_search.space import schema
from tunas_search.space import specs


class ArchitectureError(ValueError):
  """An architecture string does not fit its search space."""


def format_indices(indices: Sequence[int]) -> str:
  """Joins choice indices with colons."""
  return ':'.join(str(int(i)) for i in indices)


def parse_indices(text: str, spec: Any = None) -> List[int]:
  """Parses `a:b:c` and, given a spec, checks it against that spec.

  Args:
    text: the architecture string.
    spec: optional model spec to validate against.

  Returns:
    The indices.

  Raises:
    ArchitectureError: on a non-integer entry, a wrong length or an index out
      of range; the message names the bad value and what was expected.
  """
  tokens = text.strip().split(':') if text.strip() else []
  indices = []
  for pos, token in enumerate(tokens):
    token = token.strip()
    if not token.isdigit():
      raise ArchitectureError(
          f'architecture string entry {pos} is {token!r}; expected a '
          f'non-negative integer (format a:b:c, e.g. 0:2:1)')
    indices.append(int(token))
  if spec is not None:
    validate(spec, indices)
  return indices


def validate(spec: Any, indices: Sequence[int]) -> None:
  """Checks that `indices` has one in-range entry per decision of `spec`.

  Raises:
    ArchitectureError: naming the first problem found.
  """
  _validate_decisions(schema.decisions(spec), indices)


def _validate_decisions(decisions: Sequence[schema.Decision],
                        indices: Sequence[int]) -> None:
  if len(indices) != len(decisions):
    raise ArchitectureError(
        f'architecture has {len(indices)} indices but the search space has '
        f'{len(decisions)} decisions')
  for d, i in zip(decisions, indices):
    if not 0 <= i < d.num_choices:
      raise ArchitectureError(
          f'index {i} at position {d.index} ({d.path}) is out of range; '
          f'valid: 0..{d.num_choices - 1}')


def one_hot_masks(spec: Any, indices: Sequence[int]) -> List[np.ndarray]:
  """One float32 one-hot vector per decision."""
  decisions = schema.decisions(spec)
  _validate_decisions(decisions, indices)
  return [np.eye(d.num_choices, dtype=np.float32)[i]
          for d, i in zip(decisions, indices)]


def with_indices(spec: Any, indices: Sequence[int]) -> Any:
  """Returns `spec` with one-hot numpy masks attached to every decision.

  The builder turns such a spec into a stand-alone network of exactly the
  selected widths and ops, with the same variable names as the supernet.
  """
  return schema.with_masks(spec, one_hot_masks(spec, indices))


def prune(spec: Any, indices: Sequence[int]) -> Any:
  """Replaces every decision by its selected choice.

  Args:
    spec: a model spec.
    indices: one index per decision.

  Returns:
    A spec with no OneOf left.

  Raises:
    ArchitectureError: if `indices` does not fit `spec`.
  """
  validate(spec, indices)
  it = iter(indices)
  return schema.map_oneofs(lambda _, oneof: oneof.choices[next(it)], spec)


def canonicalize(spec: Any, indices: Sequence[int]) -> List[int]:
  """Sets indices under unselected choices to 0 (docs/cost_models.md).

  Two architecture strings describe the same network if and only if their
  canonical forms are equal.
  """
  validate(spec, indices)
  out = list(indices)
  for d in schema.decisions(spec):
    if any(indices[p] != c for p, c in d.parents):
      out[d.index] = 0
  return out


def largest(spec: Any) -> List[int]:
  """The largest network of a space: the last choice of every decision,
  except that a `Zero` (skip) choice is never picked.

  In the TuNAS spaces choices are ordered small to large (widths, kernel
  sizes, squeeze-excite off/on), so this is the widest, deepest network with
  the largest kernels. Used as describe_arch's default for a space.
  """
  out = []
  for d in schema.decisions(spec):
    real = [i for i, c in enumerate(d.oneof.choices)
            if not isinstance(c, specs.Zero)]
    out.append(real[-1] if real else 0)
  return out


def widest_index(decision: schema.Decision) -> int:
  """The index of a `filters` decision's widest choice, by value.

  Filter warm-up trains the widest choice (docs/method.md section 5). As in
  TuNAS it is found by value (the largest width, or the largest multiplier),
  not by position, so a space may list its widths in any order.

  Raises:
    ValueError: if a choice is neither a width nor a `FilterMultiplier`.
  """
  def value(choice):
    if isinstance(choice, specs.FilterMultiplier):
      return choice.scale
    if isinstance(choice, (int, float)) and not isinstance(choice, bool):
      return choice
    raise ValueError(f'decision {decision.path}: cannot compare the width of '
                     f'choice {choice!r}; expected an int or FilterMultiplier')
  values = [value(c) for c in decision.oneof.choices]
  return values.index(max(values))


def _match(node: Any, target: Any, path: List[str]) -> Optional[dict]:
  """Decision path -> index choices under which `node` prunes to `target`.

  Returns None if no choice does. The first matching choice of a decision
  wins; decisions under unselected choices are left out (index 0).
  """
  if isinstance(node, schema.OneOf):
    here = '/'.join(path)
    for i, choice in enumerate(node.choices):
      found = _match(choice, target, path + ['choices', str(i)])
      if found is not None:
        found[here] = i
        return found
    return None
  if type(node) is not type(target):  # pylint: disable=unidiomatic-typecheck
    return None
  kids, target_kids = schema.children(node), schema.children(target)
  if not kids:
    return {} if node == target else None
  if [k for k, _ in kids] != [k for k, _ in target_kids]:
    return None
  found = {}
  for (seg, child), (_, target_child) in zip(kids, target_kids):
    sub = _match(child, target_child, path + [seg])
    if sub is None:
      return None
    found.update(sub)
  return found


def indices_of(spec: Any, pruned: Any) -> List[int]:
  """The architecture of `spec` that prunes to `pruned`, canonicalised.

  The inverse of `prune`: e.g. a reference net written as a block string
  (`parse_block_string`) becomes its architecture string in a space.

  Raises:
    ArchitectureError: if no architecture of `spec` is `pruned`.
  """
  found = _match(spec, pruned, [])
  if found is None:
    raise ArchitectureError('the network is not an architecture of this '
                            'space (no choice of every decision gives it)')
  return canonicalize(spec, [found.get(d.path, 0)
                             for d in schema.decisions(spec)])


def random_indices(spec: Any, rng: np.random.Generator) -> List[int]:
  """Uniformly random architecture (every decision sampled independently)."""
  return [int(rng.integers(d.num_choices)) for d in schema.decisions(spec)]



# Block strings: a compact, reversible text form of a pruned architecture, for
# reports. Blocks are separated by ' | ', each written `filters: layer, ...`:
#   32: conv3_s2, relu | 16: sep3_relu, endpoint | 32: ib_k5_e3_s2_relu, +skip
# Layer tokens: conv{k}[_s{s}][_nobn]; sep{k}[_s{s}]_{act};
# ib_k{k}_e{mult}[_s{s}]_{act}[_se][_sei-{act}][_seg-{act}];
# uib_a{start k}_k{middle k}_e{mult}[_s{s}]_{act} (a kernel 0: no such
# depthwise conv; docs/mobilenet_v4.md); an activation's name; gap;
# endpoint; skip; a leading '+' for a residual.
_BLOCK_SEP = ' | '
_LAYER_SEP = ', '
_DEFAULT_SE = ('relu', 'sigmoid')


def _fmt_number(x: float) -> str:
  return f'{x:g}'


def layer_token(layer: Any) -> str:
  """Encodes one pruned layer (no OneOf inside)."""
  if isinstance(layer, schema.OneOf):
    raise ArchitectureError('block strings need a pruned spec (no OneOf); '
                            'call architecture.prune first')
  stride = lambda s: f'_s{s}' if s != 1 else ''
  if isinstance(layer, specs.Residual):
    return '+' + layer_token(layer.layer)
  if isinstance(layer, specs.Zero):
    return 'skip'
  if isinstance(layer, specs.GlobalAveragePool):
    return 'gap'
  if isinstance(layer, specs.DetectionEndpoint):
    return 'endpoint'
  if isinstance(layer, specs.Activation):
    return layer.name
  if isinstance(layer, specs.Conv):
    return (f'conv{layer.kernel_size}{stride(layer.strides)}' +
            ('' if layer.use_batch_norm else '_nobn'))
  if isinstance(layer, specs.SeparableConv):
    return f'sep{layer.kernel_size}{stride(layer.strides)}_{layer.activation}'
  if isinstance(layer, specs.DepthwiseBottleneck):
    token = (f'ib_k{layer.kernel_size}_e'
             f'{_fmt_number(layer.expansion_filters.scale)}'
             f'{stride(layer.strides)}_{layer.activation}')
    if layer.use_squeeze_and_excite:
      token += '_se'
    if layer.se_inner_activation != _DEFAULT_SE[0]:
      token += f'_sei-{layer.se_inner_activation}'
    if layer.se_gating_activation != _DEFAULT_SE[1]:
      token += f'_seg-{layer.se_gating_activation}'
    return token
  if isinstance(layer, specs.UniversalInvertedBottleneck):
    return (f'uib_a{layer.start_kernel_size}_k{layer.middle_kernel_size}_e'
            f'{_fmt_number(layer.expansion_filters.scale)}'
            f'{stride(layer.strides)}_{layer.activation}')
  raise ArchitectureError(f'no block-string form for {type(layer).__name__}')


def block_string(tower: specs.ConvTower) -> str:
  """Encodes a pruned `ConvTower` as a block string (see module comment).

  Raises:
    ArchitectureError: if the spec still has decisions.
  """
  blocks = []
  for block in tower.blocks:
    if not isinstance(block.filters, int):
      raise ArchitectureError('block strings need a pruned spec (no OneOf); '
                              'call architecture.prune first')
    layers = _LAYER_SEP.join(layer_token(l) for l in block.layers)
    blocks.append(f'{block.filters}: {layers}')
  prefix = f'base{tower.filters_base}; ' if tower.filters_base != 8 else ''
  return prefix + _BLOCK_SEP.join(blocks)


def _parse_stride_and_flags(parts: List[str], token: str):
  """Splits ['s2', 'relu', 'se', ...] into a stride and the remaining parts."""
  if parts and parts[0].startswith('s') and parts[0][1:].isdigit():
    return int(parts[0][1:]), parts[1:]
  return 1, parts


def _parse_bottleneck(token: str) -> specs.DepthwiseBottleneck:
  parts = token.split('_')[1:]
  if len(parts) < 3 or parts[0][:1] != 'k' or parts[1][:1] != 'e':
    raise ArchitectureError(f'malformed bottleneck token {token!r}; expected '
                            'ib_k<kernel>_e<expansion>[_s<stride>]_<act>')
  kernel, mult = int(parts[0][1:]), float(parts[1][1:])
  strides, rest = _parse_stride_and_flags(parts[2:], token)
  if not rest:
    raise ArchitectureError(f'bottleneck token {token!r} has no activation')
  act, flags = rest[0], rest[1:]
  se, inner, gating = False, _DEFAULT_SE[0], _DEFAULT_SE[1]
  for flag in flags:
    if flag == 'se':
      se = True
    elif flag.startswith('sei-'):
      inner = flag[4:]
    elif flag.startswith('seg-'):
      gating = flag[4:]
    else:
      raise ArchitectureError(f'unknown flag {flag!r} in {token!r}; valid: '
                              'se, sei-<act>, seg-<act>')
  return specs.DepthwiseBottleneck(
      kernel, specs.FilterMultiplier(mult), se, strides, act, inner, gating)


def _parse_uib(token: str) -> specs.UniversalInvertedBottleneck:
  parts = token.split('_')[1:]
  if (len(parts) < 4 or [p[:1] for p in parts[:3]] != ['a', 'k', 'e']
      or not parts[0][1:].isdigit() or not parts[1][1:].isdigit()):
    raise ArchitectureError(
        f'malformed UIB token {token!r}; expected uib_a<start kernel>_'
        'k<middle kernel>_e<expansion>[_s<stride>]_<act> (kernel 0: none)')
  strides, rest = _parse_stride_and_flags(parts[3:], token)
  if len(rest) != 1:
    raise ArchitectureError(f'UIB token {token!r} needs one activation '
                            'after the stride, and nothing else')
  return specs.UniversalInvertedBottleneck(
      int(parts[0][1:]), int(parts[1][1:]),
      specs.FilterMultiplier(float(parts[2][1:])), strides, rest[0])


def _parse_layer(token: str) -> Any:
  """Decodes one layer token."""
  if token.startswith('+'):
    return specs.Residual(_parse_layer(token[1:]))
  fixed = {'skip': specs.Zero, 'gap': specs.GlobalAveragePool,
           'endpoint': specs.DetectionEndpoint}
  if token in fixed:
    return fixed[token]()
  if token in specs.ACTIVATIONS:
    return specs.Activation(token)
  try:
    if token.startswith('ib_'):
      return _parse_bottleneck(token)
    if token.startswith('uib_'):
      return _parse_uib(token)
    if token.startswith('conv'):
      parts = token[4:].split('_')
      strides, rest = _parse_stride_and_flags(parts[1:], token)
      if rest not in ([], ['nobn']):
        raise ArchitectureError(f'malformed conv token {token!r}')
      return specs.Conv(int(parts[0]), strides, not rest)
    if token.startswith('sep'):
      parts = token[3:].split('_')
      strides, rest = _parse_stride_and_flags(parts[1:], token)
      if len(rest) != 1:
        raise ArchitectureError(f'malformed separable-conv token {token!r}')
      return specs.SeparableConv(int(parts[0]), strides, rest[0])
  except ValueError as e:
    if isinstance(e, ArchitectureError):
      raise
    raise ArchitectureError(f'malformed layer token {token!r}: {e}') from None
  raise ArchitectureError(
      f'unknown layer token {token!r}; valid: conv.., sep.., ib_.., uib_.., '
      f'skip, gap, endpoint, +<layer>, {", ".join(specs.ACTIVATIONS)}')


def parse_block_string(text: str) -> specs.ConvTower:
  """Decodes a block string back into the pruned `ConvTower`.

  Raises:
    ArchitectureError: naming the malformed part.
  """
  filters_base = 8
  text = text.strip()
  if text.startswith('base') and ';' in text:
    head, text = text.split(';', 1)
    if not head[4:].strip().isdigit():
      raise ArchitectureError(f'malformed prefix {head.strip()!r}; expected '
                              '"base<N>; " with N a whole number')
    filters_base = int(head[4:])
  blocks = []
  for block_text in text.split('|'):
    filters, sep, layers = block_text.partition(':')
    if not sep or not filters.strip().isdigit():
      raise ArchitectureError(
          f'malformed block {block_text.strip()!r}; expected '
          '"<filters>: <layer>, <layer>, ..."')
    tokens = [t.strip() for t in layers.split(',') if t.strip()]
    blocks.append(specs.Block(tuple(_parse_layer(t) for t in tokens),
                              int(filters)))
  return specs.ConvTower(tuple(blocks), filters_base)
