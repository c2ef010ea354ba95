"""The ``gain`` rule (any gain, margin on the point estimate): its error control by
simulation, and its decision logic on constructed pairs."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path

from sandbox.contract import rules

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rule_simulation", ROOT / "bench" / "rule_simulation.py")
assert _spec is not None and _spec.loader is not None
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)


def test_no_gain_is_accepted_at_most_alpha_of_the_time() -> None:
    rng = random.Random(7)
    for rule in ("controlled", "gain"):
        accepted = sum(sim.trial(rng, rule, 0.0, 0.02, 0.01, 0.01)[0] for _ in range(400))
        # alpha = 1%: 400 trials, expected <= 4; 12 would be a 3-sigma excess.
        assert accepted <= 12, (rule, accepted)


def test_a_clear_gain_is_accepted_within_a_few_looks() -> None:
    rng = random.Random(8)
    res = [sim.trial(rng, "gain", 0.02, 0.01, 0.01, 0.01) for _ in range(100)]
    assert sum(a for a, _ in res) >= 95
    assert sum(n for _, n in res) / len(res) <= 60


def test_gain_rule_needs_the_point_estimate_over_the_margin() -> None:
    # Every pair 0.5% faster: a certain gain, but below the 1% margin on the point estimate.
    t_cur = [1.0] * 25
    t_cand = [0.995] * 25
    assert not rules.rule_accepts(t_cur, t_cand, rule="gain", min_pairs=5,
                                  min_improvement_fraction=0.01, min_positive_fraction=0.6,
                                  alpha=0.01, looks=[25])
    t_cand = [0.985] * 25  # 1.5% faster: over the margin, and certain
    assert rules.rule_accepts(t_cur, t_cand, rule="gain", min_pairs=5,
                              min_improvement_fraction=0.01, min_positive_fraction=0.6,
                              alpha=0.01, looks=[25])
    # The controlled rule asks the bound itself to clear the margin: with this spread it does.
    assert rules.rule_accepts(t_cur, t_cand, rule="controlled", min_pairs=5,
                              min_improvement_fraction=0.01, min_positive_fraction=0.6,
                              alpha=0.01, looks=[25])
    assert math.isclose(rules.SequentialSignTest(0.01, 0.01, [25], point_margin=True).threshold, 0.0)
