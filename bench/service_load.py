"""Load test of ``kgrader serve``: N submissions from C concurrent clients, nothing lost,
each graded exactly once, latency percentiles.

Starts a local server (``python -m grader.cli serve``) on a free port with a fresh data
folder, one submitter token per client, then C client threads submit their share of N
candidates (a mix of the task's ``good`` and ``wrong`` candidates, so both verdicts are
exercised) and each waits for its report through the event stream. At the end it checks,
from the operator's ``/v1/queue`` and each job: every submission is ``done``, its
verdict is the expected one, the store recorded exactly N grades and no job twice.

Printed: N, C, workers, wall time, throughput (evaluations/min), latency submission ->
report (p50/p95/max, which on a single CPU worker is mostly queueing), the service time
of one evaluation (started -> finished, p50/p95), and the checks.

    python3 bench/service_load.py --n 40 --clients 8            # CPU, bwrap, 1 worker
    python3 bench/service_load.py --n 500 --clients 20 --device cuda   # one worker per GPU
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from grader.service.auth import Limits, add_token  # noqa: E402
from grader.service.client import Client  # noqa: E402
from grader.service.config import STORE_NAME  # noqa: E402
from grader.service.store import Store  # noqa: E402
from sandbox.contract.stats import percentile  # noqa: E402

EXPECT = {"good.py": "passed", "wrong.py": "failed"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(task: Path, data: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    tasks = data.parent / "tasks"
    shutil.copytree(task, tasks / task.name)
    port = _free_port()
    argv = [sys.executable, "-m", "grader.cli", "serve", "--tasks", str(tasks), "--data",
            str(data), "--port", str(port), "--backend", args.backend, "--device", args.device,
            "--read-per-min", "100000"]
    if args.workers:
        argv += ["--workers", str(args.workers)]
    log = (data.parent / "server.log").open("wb")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {(data.parent / 'server.log').read_text()}")
        try:
            if requests.get(url + "/v1/health", timeout=2).ok:
                return proc, url
        except requests.ConnectionError:
            time.sleep(0.3)
    raise SystemExit("the server did not start")


def client_loop(url: str, token: str, task: str, files: list[Path], out: list[dict[str, Any]],
                lock: threading.Lock) -> None:
    c = Client(url, token, timeout=60)
    for f in files:
        t0 = time.monotonic()
        job = c.submit(task, f.read_text(), "run")
        result = c.wait(job["id"], timeout=7200)
        with lock:
            out.append({"id": job["id"], "file": f.name, "latency_s": time.monotonic() - t0,
                        "state": result["submission"]["state"],
                        "verdict": result["submission"]["verdict"],
                        "service_s": result["submission"]["finished_at"]
                        - result["submission"]["started_at"]})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="submissions in total")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--workers", type=int, default=None, help="server workers (default: its own)")
    ap.add_argument("--task", type=Path, default=ROOT / "examples" / "vector_add_small")
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--wrong-every", type=int, default=4, help="every k-th submission is wrong.py")
    ap.add_argument("--json", dest="as_json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kgrader-load-"))
    data = tmp / "data"
    data.mkdir(mode=0o700)
    store = Store(data / STORE_NAME)
    lim = Limits(submit_per_min=100000, max_active=args.n, max_per_day=args.n * 10)
    tokens = [add_token(store, f"client{i}", "submitter", lim)[0] for i in range(args.clients)]
    ops = add_token(store, "bench-ops", "operator")[0]
    cands = args.task / "candidates"
    files = [cands / ("wrong.py" if args.wrong_every and i % args.wrong_every == args.wrong_every - 1
                      else "good.py") for i in range(args.n)]
    proc, url = start_server(args.task, data, args)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    try:
        t0 = time.monotonic()
        threads = [threading.Thread(target=client_loop, args=(url, tokens[i], args.task.name,
                                                              files[i :: args.clients], results, lock))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        stats = requests.get(url + "/v1/queue", headers={"Authorization": f"Bearer {ops}"},
                             timeout=30).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    lat = sorted(r["latency_s"] for r in results)
    svc = sorted(r["service_s"] for r in results)
    wrong = [r for r in results if r["verdict"] != EXPECT[r["file"]]]
    checks = {
        "all_answered": len(results) == args.n and len({r["id"] for r in results}) == args.n,
        "all_done": all(r["state"] == "done" for r in results),
        "verdicts_as_expected": not wrong,
        "store_done_equals_n": stats["jobs"]["done"] == args.n,
        "graded_once": stats["grades"] == args.n and stats["max_grades_per_job"] == 1,
    }
    out = {"n": args.n, "clients": args.clients, "workers": args.workers, "backend": args.backend,
           "device": args.device, "task": args.task.name, "wall_s": round(wall, 1),
           "evaluations_per_min": round(60 * args.n / wall, 2),
           "latency_s": {"p50": round(percentile(lat, 0.5), 2), "p95": round(percentile(lat, 0.95), 2),
                         "max": round(lat[-1], 2)},
           "service_s": {"p50": round(percentile(svc, 0.5), 2), "p95": round(percentile(svc, 0.95), 2)},
           "claims": stats["claims"], "checks": checks, "unexpected": wrong[:5]}
    if args.as_json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>20}: {v}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
