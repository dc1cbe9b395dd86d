"""Tests for tunas_search.results.selection: what a search returns, how settled it is.

The tiny space (tests/e2e/tiny.py) under exact MAdds, with hand-made
controller probabilities; no TensorFlow graph.
"""

import math

import numpy as np
import pytest

from tests.e2e.tiny_spec import tiny_spec
from tunas_search.space import architecture
from tunas_search import cost_models
from tunas_search.space import schema
from tunas_search.results import selection

MADDS = cost_models.get('madds')
CONTEXT = cost_models.CostContext(None, 28, 10, 1)
# Decisions of the tiny space, in order: stem width (2), kernel (2) and
# expansion (2) of the fixed layer, kernel (2) and expansion (2) of the
# skippable layer (counted only when it is not skipped), the skip decision
# (2: layer, Zero) and the block width (3).
SPEC = tiny_spec()
DECISIONS = schema.decisions(SPEC)


def probabilities(*rows):
  return [np.array(r, dtype=np.float64) for r in rows]


# Leans to the larger choice everywhere, a little.
LEANING = probabilities([0.4, 0.6], [0.4, 0.6], [0.4, 0.6], [0.4, 0.6],
                        [0.4, 0.6], [0.6, 0.4], [0.2, 0.3, 0.5])


def cost(indices):
  return MADDS.cost(SPEC, indices, CONTEXT)


def test_tiny_layout():
  assert [d.num_choices for d in DECISIONS] == [2, 2, 2, 2, 2, 2, 3]
  assert DECISIONS[3].parents == ((5, 0),) == DECISIONS[4].parents


def test_entropy_of_the_uniform_controller_by_hand():
  # Four binary decisions that always count (stem width, kernel, expansion,
  # skip), two that count half the time (under the skip decision's first
  # choice) and one of three choices.
  expected = 4 * math.log(2) + 2 * 0.5 * math.log(2) + math.log(3)
  assert selection.entropy(DECISIONS, selection.uniform(DECISIONS)) == (
      pytest.approx(expected))
  certain = [np.eye(d.num_choices)[0] for d in DECISIONS]
  assert selection.entropy(DECISIONS, certain) == 0.0


def test_log_probability_counts_only_decisions_that_matter():
  skipped = [1, 1, 1, 1, 1, 1, 2]  # Skip (index 1): decisions 3, 4 unused.
  expected = math.log(0.6 ** 3 * 0.4 * 0.5)
  assert selection.log_probability(DECISIONS, LEANING, skipped) == (
      pytest.approx(expected))
  kept = [1, 1, 1, 0, 1, 0, 2]
  assert selection.log_probability(DECISIONS, LEANING, kept) == (
      pytest.approx(math.log(0.6 ** 3 * 0.4 * 0.6 * 0.6 * 0.5)))


def test_sample_follows_the_probabilities_and_is_canonical():
  first = selection.sample(SPEC, LEANING, 4000, seed=3)
  assert first == selection.sample(SPEC, LEANING, 4000, seed=3)
  assert first != selection.sample(SPEC, LEANING, 4000, seed=4)
  drawn = np.array(first)
  for d, p in zip(DECISIONS, LEANING):
    if d.parents:
      continue  # Canonicalised to 0 where skipped.
    counts = np.bincount(drawn[:, d.index], minlength=d.num_choices)
    # 4,000 draws: standard error < 0.008 per frequency.
    np.testing.assert_allclose(counts / len(drawn), p, atol=0.03)
  assert all(ix == architecture.canonicalize(SPEC, ix) for ix in first[:500])


def distribution(probs, target=None, **kwargs):
  return selection.Distribution(
      SPEC, probs, cost_model=MADDS if target else None,
      context=CONTEXT if target else None, target=target,
      num_samples=kwargs.pop('num_samples', 300), seed=0, **kwargs)


def test_argmax_rule_is_tunas():
  choice = distribution(LEANING, target=1e5).choose('argmax')
  assert choice.indices == [1, 1, 1, 1, 1, 0, 2]
  assert choice.resolved == 'argmax'
  assert choice.cost == cost(choice.indices)
  assert choice.window == pytest.approx((98800.0, 101200.0))
  assert choice.in_window is False  # The largest network of the space.
  assert choice.log_probability == pytest.approx(math.log(0.6 ** 6 * 0.5))


def test_in_window_takes_the_most_probable_sample_in_the_window():
  d = distribution(LEANING, target=1e5)
  choice = d.choose('in_window')
  assert choice.in_window and 98800 <= choice.cost <= 101200
  assert choice.cost == cost(choice.indices)
  samples = selection.sample(SPEC, LEANING, 300, seed=0)
  inside = [ix for ix in samples if 98800 <= cost(ix) <= 101200]
  assert inside, 'the seeded sample reaches the window'
  best = max(selection.log_probability(DECISIONS, LEANING, ix)
             for ix in inside)
  assert choice.log_probability == pytest.approx(best)
  # auto: the argmax misses the window, so in_window.
  auto = d.choose('auto')
  assert (auto.resolved, auto.indices) == ('in_window', choice.indices)


def test_auto_keeps_an_argmax_inside_the_window():
  argmax = [1, 1, 1, 1, 1, 0, 2]
  d = distribution(LEANING, target=cost(argmax))
  auto = d.choose('auto')
  assert (auto.resolved, auto.indices, auto.in_window) == ('argmax', argmax,
                                                          True)


def test_in_window_without_any_sample_inside_takes_the_nearest():
  # The smallest network's cost is below every other: nothing reaches a
  # window around half of it, so the nearest (cheapest) one is returned.
  smallest = [0, 0, 0, 0, 0, 1, 0]
  target = cost(smallest) / 2
  choice = distribution(LEANING, target=target,
                        num_samples=50).choose('in_window')
  assert choice.in_window is False
  seen = [cost(ix) for ix in selection.sample(SPEC, LEANING, 50, seed=0)]
  assert choice.cost == min(seen + [cost([1, 1, 1, 1, 1, 0, 2])])


@pytest.mark.parametrize('rule, target_of, resolved, label', [
    # Every way a rule can end, and what the reports call it.
    ('argmax', 1.0, 'argmax', 'argmax'),
    ('auto', 1.0, 'argmax', 'auto -> argmax'),  # The argmax is in the window.
    ('auto', 0.5, 'in_window', 'auto -> in_window'),
    ('auto', 0.01, 'nearest', 'auto -> nearest'),  # Nothing reaches it.
    ('in_window', 0.5, 'in_window', 'in_window'),
    ('in_window', 0.01, 'nearest', 'in_window -> nearest'),
])
def test_the_label_names_each_fallback(rule, target_of, resolved, label):
  argmax = [1, 1, 1, 1, 1, 0, 2]
  choice = distribution(LEANING, target=target_of * cost(argmax)).choose(rule)
  assert (choice.resolved, choice.label) == (resolved, label)
  # A nearest architecture lies outside the window; every other inside.
  assert choice.in_window is (resolved != 'nearest')
  assert choice.to_dict()['label'] == label
  assert selection.format_text(choice, 'madds').startswith(
      f'final architecture ({label}): {choice.architecture}\n')


def test_settling_numbers():
  s = distribution(LEANING, target=1e5).settling
  assert s.decisions == 7 and s.settled_decisions == 0
  assert s.min_max_probability == pytest.approx(0.5)
  assert s.median_max_probability == pytest.approx(0.6)
  assert s.uniform_entropy > s.entropy > 0
  assert s.argmax_cost == cost([1, 1, 1, 1, 1, 0, 2])
  costs = [cost(ix) for ix in selection.sample(SPEC, LEANING, 300, seed=0)]
  assert s.sampled_costs['mean'] == pytest.approx(np.mean(costs))
  assert s.argmax_cost_percentile == pytest.approx(
      100 * np.mean(np.array(costs) < s.argmax_cost))
  assert s.in_window_fraction == pytest.approx(
      np.mean([98800 <= c <= 101200 for c in costs]))
  settled = probabilities([0.95, 0.05], [0.9, 0.1], [0.5, 0.5], [0.5, 0.5],
                          [0.5, 0.5], [0.99, 0.01], [1.0, 0.0, 0.0])
  assert distribution(settled).settling.settled_decisions == 4


def test_without_a_cost_model_only_argmax():
  d = distribution(LEANING)
  assert d.settling.sampled_costs is None and d.window is None
  assert d.choose('auto').resolved == 'argmax'
  assert d.choose('auto').in_window is None
  with pytest.raises(selection.SelectionError, match='needs a cost model'):
    d.choose('in_window')
  with pytest.raises(selection.SelectionError, match='valid choices: auto'):
    d.choose('best')
  with pytest.raises(selection.SelectionError, match='at least 1'):
    distribution(LEANING, num_samples=0)


def test_bounds_replace_the_relative_window():
  d = selection.Distribution(SPEC, LEANING, cost_model=MADDS,
                             context=CONTEXT, target=1e5,
                             bounds=(100500.0, 101000.0), num_samples=300)
  choice = d.choose('in_window')
  assert choice.window == (100500.0, 101000.0) and choice.cost == 100672.0


def test_window_is_tunas_83_to_85_ms_at_84():
  low, high = selection.window(84.0)
  assert (round(low, 2), round(high, 2)) == (82.99, 85.01)


def test_format_text_names_rule_cost_and_settling():
  text = selection.format_text(
      distribution(LEANING, target=1e5).choose('auto'), 'madds')
  assert text.startswith('final architecture (auto -> in_window): ')
  assert 'inside the window 98,800-101,200 madds' in text
  assert '0 of 7 decisions at >= 0.9' in text
  assert 'the argmax costs 589,496 madds' in text
