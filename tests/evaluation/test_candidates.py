"""Tests for tunas_search.evaluation.candidates: windows and random draws.

The tiny space (tests/e2e/tiny_spec.py) under exact MAdds, whose costs
are known (tests/search/test_random_search.py), and one draw of the TuNAS window
itself; no TensorFlow.
"""

import pytest

import search_spaces
from tests.e2e.tiny_spec import tiny_spec
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.evaluation import candidates

MADDS = cost_models.get('madds')
CONTEXT = cost_models.CostContext(None, 28, 10, 1)
SPEC = tiny_spec()
# The tiny space's costs include 100,280 and 100,672 MAdds (and none
# between 94,400 and 100,280 or 100,672 and 103,416): the window +-1.2%
# around 1e5 holds exactly those two.
WINDOW = candidates.window_around(1e5, 0.012)


def test_window_around_is_relative():
  assert WINDOW == pytest.approx((98800.0, 101200.0))
  assert candidates.inside(100280.0, WINDOW)
  assert not candidates.inside(101201.0, WINDOW)
  assert not candidates.inside(None, WINDOW)


def test_random_candidates_lie_in_the_window_and_repeat_with_the_seed():
  found = candidates.random_candidates(SPEC, MADDS, CONTEXT, WINDOW, 4, 7,
                                       max_attempts=2000)
  assert [c.id for c in found] == ['random-00', 'random-01', 'random-02',
                                   'random-03']
  for c in found:
    assert c.kind == candidates.RANDOM and c.window == WINDOW
    indices = architecture.parse_indices(c.architecture, SPEC)
    assert c.cost == MADDS.cost(SPEC, indices, CONTEXT)
    assert c.cost in (100280.0, 100672.0)
    assert indices == architecture.canonicalize(SPEC, indices)
  again = candidates.random_candidates(SPEC, MADDS, CONTEXT, WINDOW, 4, 7,
                                       max_attempts=2000)
  assert again == found
  assert candidates.random_candidates(SPEC, MADDS, CONTEXT, WINDOW, 0, 7,
                                      max_attempts=1) == []


def test_tunas_window_of_proxylessnas():
  spec = search_spaces.get('proxylessnas_search').spec()
  model = cost_models.get('pixel1_latency')
  context = cost_models.CostContext('proxylessnas_search')
  window = candidates.window_around(84.0, 0.012)
  (found,) = candidates.random_candidates(spec, model, context, window, 1, 0,
                                          max_attempts=2000)
  assert 82.99 <= found.cost <= 85.01


def test_unreachable_and_rare_windows_are_one_line_errors():
  with pytest.raises(candidates.CandidateError,
                     match=r'^random architectures in 1e\+07-1\.1e\+07 '
                     r'madds: no architecture of'):
    candidates.random_candidates(SPEC, MADDS, CONTEXT, (1e7, 1.1e7), 1, 0,
                                 max_attempts=100)
  # Inside the space's range, but no architecture costs 95,000-99,000.
  with pytest.raises(candidates.CandidateError,
                     match='found 0 of 1 architectures .* in 50 attempts'):
    candidates.random_candidates(SPEC, MADDS, CONTEXT, (95000.0, 99000.0), 1,
                                 0, max_attempts=50)


def searched(search, cost, architecture_string='0:0:0:0:0:0:0'):
  return candidates.Candidate(id=f'searched-{search}-argmax',
                              kind=candidates.SEARCHED,
                              architecture=architecture_string,
                              block_string='', cost=cost, search=search,
                              rules=('argmax',))


def test_own_cost_candidates_only_for_searches_that_miss_the_window():
  inside, over = 100280.0, 151240.0
  found = candidates.own_cost_candidates(
      SPEC, MADDS, CONTEXT, [searched(0, inside), searched(1, over),
                             searched(1, 52456.0)],
      WINDOW, 0.012, 2, seed=3, max_attempts=5000)
  # Search 1 twice outside: around its costliest.
  assert [c.id for c in found] == ['own-1-00', 'own-1-01']
  own = candidates.window_around(over, 0.012)
  for c in found:
    assert c.kind == candidates.OWN_COST and c.search == 1
    assert c.window == pytest.approx(own)
    assert own[0] <= c.cost <= own[1]
  assert candidates.own_cost_candidates(
      SPEC, MADDS, CONTEXT, [searched(0, over)], WINDOW, 0.012, 0, seed=3,
      max_attempts=10) == []


def test_streams_do_not_share_draws():
  seeds = {candidates.derived_seed(0, s, i) for s in (1, 2, 3)
           for i in range(3)}
  assert len(seeds) == 9
  assert all(0 <= s < 2**63 for s in seeds)
  assert candidates.training_seed(5, 1) == candidates.derived_seed(5, 3, 1)


def test_extra_architectures_from_lines():
  text = '# reference nets\n0:1:0:0:0:1:2\n\n1:1:1:1:1:0:2  # largest\n'
  lines = candidates.architecture_lines(text)
  assert lines == ('0:1:0:0:0:1:2', '1:1:1:1:1:0:2')
  parsed = candidates.parse_architectures(lines, SPEC)
  assert parsed == [[0, 1, 0, 0, 0, 1, 2], [1, 1, 1, 1, 1, 0, 2]]
  extra = candidates.extra_candidates(SPEC, parsed, MADDS, CONTEXT)
  assert [c.id for c in extra] == ['extra-00', 'extra-01']
  assert extra[1].cost == MADDS.cost(SPEC, parsed[1], CONTEXT)
  assert extra[0].architecture == '0:1:0:0:0:1:2'
  with pytest.raises(candidates.CandidateError,
                     match=r'^extra architecture 2 \(0:1\): '):
    candidates.parse_architectures(['0:1:0:0:0:1:2', '0:1'], SPEC)


def test_candidate_json_round_trip():
  c = candidates.Candidate('random-00', candidates.RANDOM, '0:1', 'b', 1.5,
                           window=(1.0, 2.0))
  assert candidates.Candidate.from_dict(c.to_dict()) == c
  s = searched(2, 3.0)
  assert candidates.Candidate.from_dict(s.to_dict()) == s


def test_searched_candidate_names_search_and_rule():
  indices = [0, 1, 0, 0, 0, 1, 2]
  c = candidates.searched_candidate(SPEC, 1, ['in_window', 'auto'], indices,
                                    100280.0)
  assert (c.id, c.kind, c.search, c.rules) == (
      'searched-1-in_window', candidates.SEARCHED, 1, ('in_window', 'auto'))
  assert c.block_string == architecture.block_string(
      architecture.prune(SPEC, indices))


def test_proxylessnas_mobile_is_a_reference_inside_the_84_ms_window():
  spec = search_spaces.get('proxylessnas_search').spec()
  model = cost_models.get('pixel1_latency')
  context = cost_models.CostContext('proxylessnas_search')
  arch = architecture.format_indices(
      search_spaces.get('proxylessnas_mobile').default_indices())
  (ref,) = candidates.reference_candidates(
      spec, 'proxylessnas_search',
      [('proxylessnas_mobile', 'proxylessnas_search', arch)], model, context)
  assert ref.id == 'ref-proxylessnas_mobile' and ref.kind == 'reference'
  # 84.4162 ms (tests/cost_models/test_pixel1.py), inside 83.0-85.0 ms.
  assert ref.cost == pytest.approx(84.4162, abs=1e-3)
  assert candidates.inside(ref.cost, candidates.window_around(84.0, 0.012))
  with pytest.raises(candidates.CandidateError, match=(
      'is an architecture of proxylessnas_search, not of the searched space '
      'mobilenet_v3_like_search')):
    candidates.reference_candidates(
        spec, 'mobilenet_v3_like_search',
        [('proxylessnas_mobile', 'proxylessnas_search', arch)], model,
        context)
