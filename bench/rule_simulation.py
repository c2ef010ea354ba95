"""The acceptance rules on simulated paired timings: false accepts and power.

``python3 bench/rule_simulation.py [--trials N] [--out FILE]``

Each trial draws pairs ``t_cur = exp(e1)``, ``t_cand = (1 - g) * exp(e2)`` with independent
normal noise of standard deviation ``sigma`` (per-sample jitter, log scale), feeds them to
the judge's own stopping logic (``SequentialSignTest``, looks 25/50/100/200) and decides
with each rule exactly as ``sandbox.contract.rules.rule_accepts`` does. Reports, per true gain
``g``, the share of trials accepted and the mean number of pairs used.

``--offsets CAL.json [CAL.json ...]``: A/A with a runner pair's own offset, from measured
parameters. For each workload of the calibration files (``bench/calibration.py``), its
kernel time, the per-pair noise of its decisions (the median over decisions of the MAD of
``ln(t_cand/t_cur)``, as a normal sd) and the offset between pairs (the pooled
``offset_sd_us``); each trial draws one offset for its pair, then the pairs, and decides with
the allowance ``--pair-offset-us`` and without it.
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


def aa_trial(rng: random.Random, rule: str, t_us: float, sigma: float, offset_sd_us: float,
             allowance_us: float, delta: float = 0.01, alpha: float = 0.01) -> bool:
    off = rng.gauss(0.0, offset_sd_us)
    seq = rules.SequentialSignTest(delta, alpha, LOOKS[:3], point_margin=rule == "gain",
                                   offset_ms=allowance_us / 1e3) if rule != "seed" else None
    cur: list[float] = []
    cand: list[float] = []
    for _ in range(100 if seq else 30):
        cur.append(t_us / 1e3 * math.exp(rng.gauss(0.0, sigma)))
        cand.append((t_us - off) / 1e3 * math.exp(rng.gauss(0.0, sigma)))
        if seq is not None and seq.add(cur[-1], cand[-1]) != "continue":
            break
    return rules.rule_accepts(cur, cand, rule=rule, min_pairs=5, min_improvement_fraction=delta,
                              min_positive_fraction=0.6, alpha=alpha, looks=LOOKS[:3],
                              offset_ms=allowance_us / 1e3)


def offsets(files: list[Path], trials: int, allowance_us: float) -> dict[str, object]:
    """False accepts of A/A decisions with a pair's offset, from measured parameters."""
    import statistics

    pooled: dict[str, dict[str, list[float]]] = {}
    docs = []
    for f in files:  # a calibration file, or a results file holding several under its keys
        doc = json.loads(f.read_text())
        docs += [doc] if "workloads" in doc else [v for v in doc.values()
                                                  if isinstance(v, dict) and "workloads" in v]
    for doc in docs:
        for w, v in doc["workloads"].items():
            aa = v.get("aa") or {}
            for d in aa.get("raw", []):
                lr = [math.log(k / c) for c, k in zip(d["t_cur"], d["t_cand"], strict=True)]
                mid = statistics.median(lr)
                mad = statistics.median(abs(x - mid) for x in lr)
                p = pooled.setdefault(w, {"t": [], "sigma": [], "off": []})
                p["t"].append(statistics.median(d["t_cur"]) * 1e3)
                p["sigma"].append(1.4826 * mad / math.sqrt(2))
            if aa.get("offset_sd_us"):
                pooled[w]["off"].append(float(aa["offset_sd_us"]))
    out: dict[str, object] = {}
    for w, p in pooled.items():
        t, sigma = statistics.median(p["t"]), statistics.median(p["sigma"])
        off_sd = max(p["off"]) if p["off"] else 0.1
        row: dict[str, object] = {"t_us": round(t, 3), "sigma": round(sigma, 5),
                                  "offset_sd_us": round(off_sd, 4), "decisions_measured": len(p["t"])}
        for rule in ("seed", "controlled", "gain"):
            for name, allow in (("without", 0.0), ("with", allowance_us)):
                rng = random.Random(f"{w}-{rule}-{name}")
                row[f"{rule}_{name}"] = sum(aa_trial(rng, rule, t, sigma, off_sd, allow)
                                            for _ in range(trials)) / trials
        out[w] = row
    return {"trials": trials, "pair_offset_us": allowance_us, "offset_sd": "largest measured",
            "workloads": out}


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
    p.add_argument("--offsets", type=Path, nargs="+", help="calibration JSON files (A/A raw)")
    p.add_argument("--pair-offset-us", type=float, default=0.25)
    a = p.parse_args()
    if a.offsets:
        text = json.dumps(offsets(a.offsets, a.trials, a.pair_offset_us), indent=1)
        if a.out:
            a.out.write_text(text + "\n")
        print(text)
        return
    result = {f"sigma={s}": simulate(a.trials, s) for s in (0.005, 0.01, 0.02)}
    text = json.dumps({"trials": a.trials, "delta": 0.01, "alpha": 0.01, "looks": LOOKS,
                       "results": result}, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
