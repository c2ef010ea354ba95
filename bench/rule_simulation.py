"""The acceptance rules on simulated paired timings: false accepts and power.

``python3 bench/rule_simulation.py [--trials N] [--out FILE]``

Each trial draws pairs ``t_cur = exp(e1)``, ``t_cand = (1 - g) * exp(e2)`` with independent
normal noise of standard deviation ``sigma`` (per-sample jitter, log scale), feeds them to
the judge's own stopping logic (``SequentialSignTest``, looks 25/50/100/200) and decides
with each rule exactly as ``sandbox.contract.rules.rule_accepts`` does. Reports, per true gain
``g``, the share of trials accepted and the mean number of pairs used.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.contract import rules

LOOKS = (25, 50, 100, 200)


def trial(rng: random.Random, rule: str, gain: float, sigma: float, delta: float, alpha: float,
          seed_pairs: int = 30) -> tuple[bool, int]:
    seq = rules.SequentialSignTest(delta, alpha, LOOKS, point_margin=rule == "gain") \
        if rule != "seed" else None
    cur: list[float] = []
    cand: list[float] = []
    n_max = LOOKS[-1] if seq else seed_pairs
    for _ in range(n_max):
        cur.append(math.exp(rng.gauss(0.0, sigma)))
        cand.append((1.0 - gain) * math.exp(rng.gauss(0.0, sigma)))
        if seq is not None:
            seq.add(cur[-1], cand[-1])
            if seq.decision() != "continue":
                break
    ok = rules.rule_accepts(cur, cand, rule=rule, min_pairs=5, min_improvement_fraction=delta,
                            min_positive_fraction=0.6, alpha=alpha, looks=LOOKS)
    return ok, len(cur)


def simulate(trials: int, sigma: float, delta: float = 0.01, alpha: float = 0.01,
             seed: int = 20261130) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for rule in ("seed", "controlled", "gain"):
        out[rule] = {}
        for gain in (0.0, 0.005, 0.01, 0.02, 0.05):
            rng = random.Random(f"{seed}-{rule}-{gain}-{sigma}")
            res = [trial(rng, rule, gain, sigma, delta, alpha) for _ in range(trials)]
            out[rule][f"{gain:g}"] = {"accept_rate": sum(a for a, _ in res) / trials,
                                      "mean_pairs": sum(n for _, n in res) / trials}
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    result = {f"sigma={s}": simulate(a.trials, s) for s in (0.005, 0.01, 0.02)}
    text = json.dumps({"trials": a.trials, "delta": 0.01, "alpha": 0.01, "looks": LOOKS,
                       "results": result}, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
