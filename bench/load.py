"""Honest verdicts under load (issue 23): no honest kernel fails, no cheat passes.

Usage::

    python3 bench/load.py [--n 200] [--parallel 4] [--docker-every 4] [--cheats 10]
                          [--snapshot] [--out bench/results/load-DATE.jsonl]

Grades, with ``kgrader run --device cpu --json``, the honest kernels of the examples
(``examples/*/candidates/good.py`` of the tasks the CPU interpreter runs; every
ACCEPT_EVERY-th of them with ``--current`` the same kernel, an A/A acceptance whose "not
accepted" is a result, not a failure) and the shipped correct solutions of the field
examples (``examples/field/**/good.py``, imported with ``kgrader task import``; timed with
FIELD_TIMING = warm-up, blocks, calls per block, 2,10,2 by default, ``imported`` keeps the
import's 10,25,5, five times slower on the CPU interpreter), PARALLEL at a time (default
two per core: the load is made of honest evaluations whose verdicts also count). Every
DOCKER_EVERY-th evaluation runs on the docker backend, the others on bwrap. A few cheats of
``tests/attacks/runtime`` and of the field examples run among them (scan off for the
runtime ones, as in tests/e2e/test_runtime_attacks.py) and must fail with their own code.

An infrastructure verdict (``timing_unreliable``, a sandbox that could not start, an
unparsable answer) is retried up to RETRIES times and counted; a candidate-origin failure
of an honest kernel is an honest rejection. Every attempt is one JSON line of OUT; the last
line is the summary, which is also printed. Exit 0 only with no honest rejection, no cheat
passed and no evaluation left without a verdict after its retries.

``--snapshot`` grades with a copy of the committed tree (``git archive HEAD``), so that
edits made in the working tree during a long run do not change what is measured; the
commit is recorded.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PMPP = ("histogram", "prefixsum", "vectoradd_out")  # GPU MODE replicas solved in torch
EXAMPLE_TASKS = ("vector_add_small", "softmax", "matmul")  # vector_add is GPU-sized
RUNTIME_ONLY = "tests/policies/runtime-only.toml"
ATTACK_LIMITS = ("--compile-s", "60", "--run-s", "20", "--memory-mib", "1536")
# (file under tests/attacks/runtime, allowed codes): a subset of the table in
# tests/e2e/test_runtime_attacks.py, the ones that a loaded clock could blur.
RUNTIME_CHEATS: tuple[tuple[str, frozenset[str]], ...] = (
    ("side_stream.py", frozenset({"output_untouched", "wrong_values", "background_thread",
                                  "work_escaped_timing"})),
    ("background_thread.py", frozenset({"output_untouched", "wrong_values", "background_thread",
                                        "work_escaped_timing"})),
    ("timer_patch.py", frozenset({"work_escaped_timing"})),
    ("cache_by_call_count.py", frozenset({"output_untouched"})),
    ("batch_and_skip.py", frozenset({"output_untouched"})),
    ("lazy_output.py", frozenset({"output_untouched"})),
    ("input_mutation.py", frozenset({"input_mutated"})),
    ("import_thread_deferred.py", frozenset({"background_thread"})),
    ("infinite_loop_launch.py", frozenset({"timeout"})),
    ("kill_judge.py", frozenset({"exception", "judge_died"})),
)
# (imported task, submission under examples/field, code): from tests/e2e/test_field_tasks.py
FIELD_CHEATS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("kb/kb_1_relu", "kernelbench/submissions/1_ReLU/cheat.py", frozenset({"wrong_values"})),
    ("kb/kb_4_layernorm", "kernelbench/submissions/4_LayerNorm/cheat.py",
     frozenset({"input_mutated"})),
    ("gm/gm_vectoradd", "gpumode/vectoradd/submissions/cheat.py",
     frozenset({"torch_compute_in_launch"})),
)


@dataclass(frozen=True)
class Job:
    i: int
    kind: str  # "honest" | "cheat"
    task: Path
    candidate: Path
    backend: str
    extra: tuple[str, ...] = ()
    expect: frozenset[str] = frozenset()


@dataclass
class Outcome:
    job: Job
    verdict: str  # passed | rejected | stopped | stopped_other | cheat_passed | no_verdict
    attempts: list[dict[str, Any]] = field(default_factory=list)


def snapshot(dest: Path) -> str:
    """Export HEAD into ``dest``; return the commit."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def kgrader(tree: Path, *args: str | Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=tree)


def import_field(tree: Path, work: Path, timing: tuple[int, int, int] | None) -> None:
    """As tests/e2e/test_field_tasks.py and test_gpumode_semantics.py import them: the GPU
    MODE problems with ``--policy triton-only``, except the PMPP replicas, whose correct
    solutions are torch code (the importer's default policy)."""
    field_dir = tree / "examples" / "field"
    gm = field_dir / "gpumode"
    imports: list[tuple[str, Path, tuple[str, ...]]] = [
        ("kernelbench", field_dir / "kernelbench" / "problems", ())]
    imports += [("gpumode", d, () if d.name in PMPP else ("--policy", "triton-only"))
                for d in sorted(gm.iterdir()) if (d / "task.yml").is_file()]
    for fmt, src, extra in imports:
        out = work / ("kb" if fmt == "kernelbench" else "gm")
        p = kgrader(tree, "task", "import", fmt, src, "--out", out, *extra,
                    "--backend", "bwrap", "--device", "cpu", timeout=1800)
        if p.returncode != 0:
            sys.exit(f"task import {fmt} {src.name} failed (rc {p.returncode}): {p.stderr[-2000:]}")
    if timing is None:
        return
    for out in (work / "kb", work / "gm"):
        for spec_path in out.glob("*/task.json"):
            spec = json.loads(spec_path.read_text())
            spec["benchmark"] = dict(zip(("warmup", "samples", "reps"), timing, strict=True))
            spec_path.write_text(json.dumps(spec, indent=1))


def field_timing(text: str) -> tuple[int, int, int] | None:
    if text == "imported":
        return None
    try:
        warmup, samples, reps = (int(x) for x in text.split(","))
    except ValueError:
        sys.exit(f"--field-timing: 'warmup,samples,reps' or 'imported', not {text!r}")
    return warmup, samples, reps


def honest_set(tree: Path, work: Path) -> list[tuple[Path, Path]]:
    pairs = [(tree / "examples" / t, tree / "examples" / t / "candidates" / "good.py")
             for t in EXAMPLE_TASKS]
    kb_subs = tree / "examples" / "field" / "kernelbench" / "submissions"
    pairs += [(work / "kb" / ("kb_" + d.name.lower()), d / "good.py")
              for d in sorted(kb_subs.iterdir()) if (d / "good.py").is_file()]
    gm = tree / "examples" / "field" / "gpumode"
    pairs += [(work / "gm" / ("gm_" + d.name), d / "submissions" / "good.py")
              for d in sorted(gm.iterdir()) if (d / "submissions" / "good.py").is_file()]
    missing = [str(t) for t, _ in pairs if not (t / "task.json").is_file()]
    if missing:
        sys.exit(f"tasks not found (import failed?): {missing}")
    return pairs


Cheat = tuple[Path, Path, tuple[str, ...], frozenset[str]]


def cheat_set(tree: Path, work: Path) -> list[Cheat]:
    attacks = tree / "tests" / "attacks" / "runtime"
    out: list[Cheat] = [(tree / "examples" / "vector_add_small", attacks / name,
            ("--policy", str(tree / RUNTIME_ONLY), *ATTACK_LIMITS), codes)
           for name, codes in RUNTIME_CHEATS]
    out += [(work / task, tree / "examples" / "field" / sub, (), codes)
            for task, sub, codes in FIELD_CHEATS]
    return out


def plan(n: int, cheats: int, docker_every: int, accept_every: int, tree: Path,
         work: Path) -> list[Job]:
    """N honest jobs cycling through the honest set, CHEATS cheats spread evenly among them."""
    honest = itertools.cycle(honest_set(tree, work))
    cheat_pool = itertools.cycle(cheat_set(tree, work))
    gap = max(1, n // cheats) if cheats else 0
    jobs: list[Job] = []
    made = examples = 0
    for k in range(n):
        task, cand = next(honest)
        extra: tuple[str, ...] = ()
        if task.parent == tree / "examples":
            examples += 1
            if accept_every and examples % accept_every == 0:
                extra = ("--current", str(cand))
        jobs.append(Job(len(jobs), "honest", task, cand,
                        "docker" if docker_every and k % docker_every == docker_every - 1 else "bwrap",
                        extra))
        if gap and k % gap == gap // 2 and made < cheats:
            task, cand, extra, codes = next(cheat_pool)
            jobs.append(Job(len(jobs), "cheat", task, cand,
                            "docker" if docker_every and made % docker_every == 1 else "bwrap",
                            extra, codes))
            made += 1
    return jobs


def attempt(tree: Path, job: Job, timeout: float) -> dict[str, Any]:
    t0 = time.monotonic()
    row: dict[str, Any] = {"i": job.i, "kind": job.kind, "task": job.task.name,
                           "candidate": str(job.candidate.relative_to(tree)), "backend": job.backend,
                           "started": datetime.now(UTC).isoformat(timespec="seconds"),
                           "load1": round(os.getloadavg()[0], 2)}
    try:
        p = kgrader(tree, "run", job.task, job.candidate, "--backend", job.backend, "--device",
                    "cpu", "--json", *job.extra, timeout=timeout)
    except subprocess.TimeoutExpired:
        row.update(rc=None, ok=None, origin="infrastructure", code="bench_timeout",
                   wall_s=round(time.monotonic() - t0, 2))
        return row
    row.update(rc=p.returncode, wall_s=round(time.monotonic() - t0, 2))
    try:
        r = json.loads(p.stdout)
    except ValueError:
        row.update(ok=None, origin="infrastructure", code="no_report",
                   message=(p.stdout + p.stderr)[-600:])
        return row
    # A failure without a report is the CLI's error document: {ok, error: {code, origin, ...}}
    first = r["errors"][0] if r.get("errors") else None
    if first is None and isinstance(r.get("error"), dict):
        first = {"stage": "cli", "code": r["error"].get("code"),
                 "origin": r["error"].get("origin") or "infrastructure",
                 "message": str(r["error"].get("message", ""))}
    timing = r.get("timing") or {}
    esc = timing.get("escape") or {}
    acc = r.get("acceptance") or {}
    row.update(ok=r.get("ok"), stage=r.get("stage"), median_ms=timing.get("median_ms"),
               hidden_ms=esc.get("hidden_ms"), budget_ms=esc.get("budget_ms"),
               accepted=acc.get("accepted"), pairs=acc.get("pairs"))
    # An acceptance that ran and said "not accepted" has no error: a result, not a failure.
    row["verdict_ok"] = r.get("ok") is True or (r.get("stage") == "accept" and not first)
    if first:
        row.update(err_stage=first["stage"], code=first["code"], origin=first["origin"],
                   message=first["message"][:400])
    return row


STOPPING = threading.Event()  # SIGINT/SIGTERM: no attempt starts, the running ones finish


def grade(tree: Path, job: Job, retries: int, timeout: float, sink: Sink,
          stop_at: float = float("inf")) -> Outcome:
    out = Outcome(job, "no_verdict")
    if time.monotonic() > stop_at or STOPPING.is_set():
        out.verdict = "not_started"
        return out
    for n in range(retries + 1):
        if n and STOPPING.is_set():
            out.verdict = "interrupted"  # before its retry: no verdict, and not counted as one
            return out
        row = attempt(tree, job, timeout)
        row["attempt"] = n
        out.attempts.append(row)
        sink.write(row)
        if row.get("verdict_ok") is True:
            out.verdict = "passed" if job.kind == "honest" else "cheat_passed"
            return out
        if row.get("origin") != "infrastructure":
            if job.kind == "honest":
                out.verdict = "rejected"
            else:
                out.verdict = "stopped" if row.get("code") in job.expect else "stopped_other"
            return out
    return out


class Sink:
    """One JSON line per attempt, written whole under a lock."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = path.open("a", encoding="utf-8")
        self.lock = threading.Lock()

    def write(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.f.write(json.dumps(row, sort_keys=True) + "\n")
            self.f.flush()


def summarise(outcomes: list[Outcome], meta: dict[str, Any]) -> dict[str, Any]:
    skipped = sum(o.verdict == "not_started" for o in outcomes)
    cut = sum(o.verdict == "interrupted" for o in outcomes)
    outcomes = [o for o in outcomes if o.verdict not in ("not_started", "interrupted")]
    meta = {**meta, "not_started_at_max_wall": skipped, "interrupted_before_a_retry": cut}
    honest = [o for o in outcomes if o.job.kind == "honest"]
    cheats = [o for o in outcomes if o.job.kind == "cheat"]
    retried = [a for o in outcomes for a in o.attempts[:-1]] + \
        [o.attempts[-1] for o in outcomes if o.verdict == "no_verdict"]
    loads = [a["load1"] for o in outcomes for a in o.attempts]
    walls = sorted(o.attempts[-1]["wall_s"] for o in outcomes)
    ratios = [a["hidden_ms"] / a["budget_ms"] for o in honest for a in o.attempts
              if a.get("budget_ms") and a.get("hidden_ms") is not None]

    def brief(o: Outcome) -> dict[str, Any]:
        a = o.attempts[-1]
        return {"i": o.job.i, "task": o.job.task.name, "candidate": a["candidate"],
                "backend": o.job.backend, "stage": a.get("err_stage"), "code": a.get("code"),
                "message": a.get("message")}

    return {**meta,
            "evaluations": len(outcomes), "attempts": sum(len(o.attempts) for o in outcomes),
            "honest": len(honest), "honest_passed": sum(o.verdict == "passed" for o in honest),
            "honest_rejections": [brief(o) for o in honest if o.verdict == "rejected"],
            "honest_docker": sum(o.job.backend == "docker" for o in honest),
            "honest_with_acceptance": sum(bool(o.job.extra) for o in honest),
            "aa_accepted": sum(o.attempts[-1].get("accepted") is True for o in honest),
            "cheats": len(cheats), "cheats_stopped_own_code": sum(o.verdict == "stopped" for o in cheats),
            "cheats_passed": [brief(o) for o in cheats if o.verdict == "cheat_passed"],
            "cheats_other_code": [brief(o) for o in cheats if o.verdict == "stopped_other"],
            "retries": len([a for o in outcomes for a in o.attempts[1:]]),
            "retried_codes": dict(Counter(str(a.get("code")) for a in retried)),
            "no_verdict_after_retries": [brief(o) for o in outcomes if o.verdict == "no_verdict"],
            "load1_mean": round(sum(loads) / len(loads), 2) if loads else None,
            "load1_max": max(loads) if loads else None,
            "median_eval_wall_s": walls[len(walls) // 2] if walls else None,
            "max_eval_wall_s": walls[-1] if walls else None,
            "max_hidden_over_budget": round(max(ratios), 3) if ratios else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="honest evaluations")
    ap.add_argument("--parallel", type=int, default=2 * (os.cpu_count() or 1))
    ap.add_argument("--docker-every", type=int, default=4, help="0: bwrap only")
    ap.add_argument("--cheats", type=int, default=10)
    ap.add_argument("--accept-every", type=int, default=4, help="0: no acceptance runs")
    ap.add_argument("--field-timing", default="2,10,2",
                    help="warmup,samples,reps for the field tasks, or 'imported'")
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per attempt, seconds")
    ap.add_argument("--snapshot", action="store_true", help="grade with a copy of HEAD")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--max-wall-s", type=float, default=None,
                    help="start no evaluation after this many seconds (the summary says how "
                         "many were not started)")
    a = ap.parse_args()
    day = datetime.now(UTC).strftime("%Y-%m-%d-%H%M")
    out = a.out or REPO / "bench" / "results" / f"load-{day}.jsonl"
    if a.docker_every and shutil.which("docker") is None:
        sys.exit("docker is not installed: pass --docker-every 0")
    # SIGTERM unwinds like Ctrl-C: nothing new starts, the evaluations running finish (their
    # tree is removed only after them: removed under them, they failed as the harness's
    # fault), the summary covers what finished, exit 130. A second signal stops at once.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="kgrader-loadbench-") as tmp:
        work = Path(tmp)
        tree, commit = REPO, "working tree"
        if a.snapshot:
            tree = work / "tree"
            tree.mkdir()
            commit = snapshot(tree)
        import_field(tree, work, field_timing(a.field_timing))
        jobs = plan(a.n, a.cheats, a.docker_every, a.accept_every, tree, work)
        sink = Sink(out)
        started = datetime.now(UTC).isoformat(timespec="seconds")
        t0 = time.monotonic()
        stop_at = t0 + a.max_wall_s if a.max_wall_s else float("inf")
        pool = ThreadPoolExecutor(a.parallel)
        futs = [pool.submit(grade, tree, j, a.retries, a.timeout, sink, stop_at) for j in jobs]
        interrupted = False
        try:
            for f in futs:
                f.result()
        except KeyboardInterrupt:
            interrupted = True
            STOPPING.set()
            print("load: stopping: nothing new starts; waiting for the running evaluations",
                  file=sys.stderr, flush=True)
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except KeyboardInterrupt:
            print("load: stopped at once (a second signal): no summary", file=sys.stderr)
            sys.exit(130)
        outcomes = [f.result() for f in futs if f.done() and not f.cancelled()]
        meta = {"summary": True, "started": started, "commit": commit, "argv": sys.argv,
                "cores": os.cpu_count(), "parallel": a.parallel, "field_timing": a.field_timing,
                "wall_s": round(time.monotonic() - t0, 1), "interrupted": interrupted,
                "not_started_at_stop": sum(f.cancelled() for f in futs)}
        summary = summarise(outcomes, meta)
        sink.write(summary)
    print(json.dumps(summary, indent=1))
    bad = summary["honest_rejections"] or summary["cheats_passed"] or summary["no_verdict_after_retries"]
    sys.exit(1 if bad else 130 if interrupted else 0)


if __name__ == "__main__":
    main()
