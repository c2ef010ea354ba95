"""Can a runner under one uid open CUDA IPC memory that a judge under another uid made?

Run as root on a GPU host: ``python3 bench/gpu_ipc_uids.py``. The owner (uid 65534)
allocates a tensor and prints its pickled IPC handle; the user (uid 65500, no
capabilities) opens it, writes a pattern and exits; the owner checks the pattern. Prints
one JSON line with what happened.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

DROP = ["setpriv", "--reuid", "{uid}", "--regid", "{uid}", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", "--no-new-privs"]


def owner() -> None:
    import io
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing

    t = torch.zeros(1 << 20, dtype=torch.float32, device="cuda")
    buf = io.BytesIO()
    ForkingPickler(buf).dump(t)
    print(base64.b64encode(buf.getvalue()).decode(), flush=True)
    sys.stdin.readline()  # the user is done
    torch.cuda.synchronize()
    print(json.dumps({"sum": float(t.sum()), "expect": float(3 * (1 << 20))}), flush=True)


def user() -> None:
    import pickle

    import torch
    import torch.multiprocessing

    data = base64.b64decode(sys.stdin.readline())
    t = pickle.loads(data)
    t.fill_(3.0)
    torch.cuda.synchronize()
    print("done", flush=True)


def main() -> None:
    if sys.argv[1:] == ["owner"]:
        return owner()
    if sys.argv[1:] == ["user"]:
        return user()
    cmd = lambda uid, role: [a.format(uid=uid) for a in DROP] + [sys.executable, __file__, role]  # noqa: E731
    own = subprocess.Popen(cmd(65534, "owner"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    handle = own.stdout.readline()  # type: ignore[union-attr]
    usr = subprocess.run(cmd(65500, "user"), input=handle, capture_output=True, text=True,
                         timeout=120)
    own.stdin.write("x\n")  # type: ignore[union-attr]
    own.stdin.flush()  # type: ignore[union-attr]
    out = own.stdout.readline()  # type: ignore[union-attr]
    own.wait(timeout=60)
    print(json.dumps({"user_rc": usr.returncode, "user_err": usr.stderr[-600:],
                      "owner": out.strip(), "owner_err": own.stderr.read()[-600:]}))  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
