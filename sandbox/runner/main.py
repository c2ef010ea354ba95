"""Runner: imports the candidate and serves the judge's launch requests.

Untrusted code lives in this process. Nothing it reports is believed without a check:
the judge decides correctness from its own memory and cross-checks every time claim.
"""

from __future__ import annotations

import time

_T_START = time.monotonic()  # before torch: the runner reports its import cost

import argparse
import errno
import importlib.util
import mmap
import os
import sys
import traceback
from types import ModuleType
from typing import Any

import torch

from sandbox.contract.text import NAME_CAP, clean
from sandbox.launcher import driver, harden, protocol
from sandbox.launcher.proc import runner_arg_parser
from sandbox.problem.tensors import DTYPES
from sandbox.runner import extcache
from sandbox.runner.boundary import SealBroken
from sandbox.runner.handlers import Dispositions
from sandbox.runner.op_audit import AuditTampered, audited, report
from sandbox.runner.prepare import prepare_triton, prime_backend
from sandbox.runner.returned import Returned
from sandbox.runner.timing import Timer, _perf_ns, thread_count
from sandbox.runner.twin import TwinError, Twins, install

_T_IMPORTED = time.monotonic()
_setprofile, _settrace = sys.setprofile, sys.settrace
_monitoring = getattr(sys, "monitoring", None)


def _no_hooks() -> None:
    """Remove any profile/trace function or ``sys.monitoring`` tool the call installed.

    Runs as the last step *inside* the timed call: such a hook would otherwise run candidate
    code in the harness's own Python calls after the timed region (building the reply,
    copying returned outputs), work that no clock would see. Removing it may itself run the
    hook once (a ``c_call`` event), still inside the timed region."""
    _setprofile(None)
    _settrace(None)
    if _monitoring is not None:
        for tool in range(6):
            if _monitoring.get_tool(tool) is not None:
                _monitoring.set_events(tool, 0)
                _monitoring.free_tool_id(tool)
_PREPARE_S = 0.0  # prepare_triton's seconds, reported with the setup


def _error(code: str, exc: BaseException, path: str) -> dict[str, Any]:
    line = None
    if isinstance(exc, SyntaxError) and exc.filename == path:
        line = exc.lineno
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == path:
            line = frame.lineno
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return {"ok": False, "error": {"code": code, "type": clean(type(exc).__name__, NAME_CAP),
                                   "message": clean(text, 2000), "line": line}}


def _classify(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return "memory_limit"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "disk_limit"
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "gpu_memory_limit"
    if isinstance(exc, BlockingIOError) or (isinstance(exc, RuntimeError)
                                            and "can't start new thread" in str(exc)):
        return "pids_limit"
    if isinstance(exc, SystemExit | KeyboardInterrupt):
        return "early_exit"
    return "exception"


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.rfd, self.wfd = args.read_fd, args.write_fd
        self.fd_sock = args.fd_sock
        self.path, self.entry, self.device = args.module, args.entry, args.device
        self.base: torch.Tensor | None = None
        self.bases: list[torch.Tensor] = []
        self.fn: Any = None
        self.timer: Timer | None = None
        self._views: dict[str, list[torch.Tensor]] = {}
        self.allow_tf32 = False
        self.streams_created = 0
        self.default_stream: Any = None
        self.cuda_graph = False
        self._graphs: dict[str, Any] = {}
        self._harness_streams = False
        self.returned = Returned({}, self.device)
        self.twins: Twins | None = None
        self.signals: Dispositions | None = None  # the harness's, before the import

    def _handler_error(self, when: str) -> dict[str, Any] | None:
        found = self.signals.new_handlers() if self.signals is not None else None
        if found is None:
            return None
        return {"ok": False, "error": {"code": "signal_handler", "type": "SignalHandler", "line": None,
                                       "message": clean(f"{when} the candidate installed signal "
                                                        f"handler(s): {found}; handlers run code "
                                                        "between calls, outside the timing", 2000)}}

    def device_now(self) -> dict[str, Any]:
        """Create this runner's CUDA context now, beside the judge's (its setup would)."""
        t0 = time.monotonic()
        if self.device == "cuda":
            from sandbox.launcher.gpu_share import create_context

            create_context()
            if os.environ.get("TRITON_INTERPRET") != "1":
                prime_backend()
        return {"ok": True, "device_s": round(time.monotonic() - t0, 4)}

    def setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = time.monotonic()
        import socket

        with socket.socket(fileno=os.dup(self.fd_sock)) as sock:
            _, fds, _, _ = socket.recv_fds(sock, 1, 8)
        if self.device == "cpu":
            fd = fds[0]
            self._mm = mmap.mmap(fd, int(msg["nbytes"]))
            os.close(fd)
            self.base = torch.frombuffer(self._mm, dtype=torch.uint8)
            self.bases = [self.base]
        else:
            from sandbox.launcher.gpu_share import import_buffer

            self._gpu = [import_buffer(fd, int(n)) for fd, n in zip(fds, msg["sizes"], strict=True)]
            for fd in fds:
                os.close(fd)
            self.bases = [b.tensor for b in self._gpu]
            self.base = self.bases[0]
            if msg.get("gpu_fraction"):
                torch.cuda.set_per_process_memory_fraction(float(msg["gpu_fraction"]))
        self.allow_tf32 = bool(msg.get("allow_tf32", False))
        self.cuda_graph = bool(msg.get("cuda_graph", False)) and self.device == "cuda"
        self.audit_ops = bool(msg.get("audit_ops", False))
        self.returned = Returned(msg, self.device)  # returned-output contracts (sandbox.runner.returned)
        if self.audit_ops and msg.get("twins") and not self.returned.active:
            # Kernel-only, destination passing: the host code gets decoys (sandbox.runner.twin).
            self.twins = Twins()
            install(lambda: self.twins)
        warm_harness(self.device)
        self.timer = Timer(self.device, msg.get("cache", "hot"), msg.get("flush_mib"))
        return {"ok": True, "flush_bytes": self.timer.flush_nbytes, "lead_us": self.timer.lead_us, "threads": thread_count(),
                "import_s": round(_T_IMPORTED - _T_START, 4), "prepare_s": round(_PREPARE_S, 4),
                "setup_s": round(time.monotonic() - t0, 4)}

    def _guard_streams(self) -> None:
        """Count CUDA streams the candidate creates: timed work must stay on the timed stream.

        Python-level only (native code could bypass it); the static scan and the judge's
        wall-clock cross-check are the other layers.
        """
        if self.device != "cuda":
            return
        real = torch.cuda.Stream
        runner = self

        class CountedStream(real):  # type: ignore[misc,valid-type]
            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                # torch wraps existing streams (current_stream(), ...) through the same
                # constructor with a stream_id; only a stream with no id is a new one.
                if "stream_id" not in kwargs and "stream_ptr" not in kwargs \
                        and not runner._harness_streams:
                    runner.streams_created += 1
                return super().__new__(cls, *args, **kwargs)

        torch.cuda.Stream = CountedStream  # type: ignore[misc]
        torch.cuda.streams.Stream = CountedStream  # type: ignore[misc]
        self.default_stream = torch.cuda.current_stream()

    def load(self) -> dict[str, Any]:
        self._guard_streams()
        try:
            spec = importlib.util.spec_from_file_location("candidate", self.path)
            if spec is None or spec.loader is None:
                return {"ok": False, "error": {"code": "import", "type": "ImportError",
                                               "message": "cannot load module", "line": None}}
            mod: ModuleType = importlib.util.module_from_spec(spec)
            if self.returned.active:
                self.returned.before_import()
            sys.modules["candidate"] = mod
            self.signals = Dispositions()
            spec.loader.exec_module(mod)
        except SyntaxError as e:
            return _error("syntax", e, self.path)
        except BaseException as e:  # the candidate may raise anything, SystemExit included
            code = _classify(e)
            return _error("import" if code == "exception" else code, e, self.path)
        if self.returned.active:
            try:  # ModelNew(*init) is built here, under the reference's init seed
                fn, why = self.returned.entry(mod, self.entry)
            except BaseException as e:
                return _error(_classify(e), e, self.path)
        else:
            fn = getattr(mod, self.entry, None)
            why = None if callable(fn) else f"candidate defines no callable {self.entry!r}"
        if why is not None:
            return {"ok": False, "error": {"code": "missing_entrypoint", "type": "AttributeError",
                                           "message": why, "line": None}}
        self.fn = fn
        return self._handler_error("at import") or {"ok": True, "threads": thread_count()}

    def _args(self, slots: list[dict[str, Any]], buf: int = 0) -> list[torch.Tensor]:
        slots = [{k: s[k] for k in ("dtype", "shape", "offset")} for s in slots]
        key = repr((slots, buf))
        views = self._views.get(key)
        if views is None:
            base = self.bases[buf] if 0 <= buf < len(self.bases) else self.bases[0]
            views = []
            for s in slots:
                n = DTYPES[s["dtype"]].itemsize
                count = 1
                for d in s["shape"]:
                    count *= int(d)
                raw = base[int(s["offset"]): int(s["offset"]) + count * n]
                views.append(raw.view(DTYPES[s["dtype"]]).view(tuple(s["shape"])))
            if len(self._views) >= 8:  # inputs and outputs of a few shapes
                self._views.clear()
            self._views[key] = views
        return views

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.timer is not None
        t_in = _perf_ns()
        noop = bool(msg.get("noop"))
        # An empty call takes the same path as a real one (audit, flags, the same reply),
        # so that the judge's overhead estimate holds everything but the launch itself.
        args = [] if noop else self._args(msg["args"], int(msg.get("buf", 0)))
        twins = None if noop else self.twins
        if twins is not None:
            args = twins.bind(repr((msg["args"], msg.get("buf", 0))), args)
        fn = (lambda *a: None) if noop else self.fn
        body = lambda: fn(*args)  # noqa: E731
        if self.returned.active and not noop:
            body = self.returned.bind(self.fn, msg["data"], args)

        def call() -> None:
            body()  # type: ignore[no-untyped-call]
            _no_hooks()  # inside the timed region
        # Re-pin the precision flags before every call; report if the call changed them.
        torch.backends.cuda.matmul.allow_tf32 = self.allow_tf32
        torch.backends.cudnn.allow_tf32 = self.allow_tf32
        timer = self.timer

        def timed() -> tuple[float, float, float]:
            if self.cuda_graph and not noop:
                replay = self._graph(repr((msg["args"], msg.get("buf", 0))), fn, args)
                return timer.time_call(replay)
            return timer.time_call(call)

        audit = None
        t_timed = t_done = 0
        try:
            if self.audit_ops:
                run, audit = audited(timed, twins)
                t_timed = _perf_ns()
                ms, wall, tail = run()
            else:
                t_timed = _perf_ns()
                ms, wall, tail = timed()
            t_done = _perf_ns()
        except AuditTampered as e:
            return _error("op_audit_tampered", e, self.path)
        except TwinError as e:
            return _error("kernel_argument_unsupported", e, self.path)
        except SealBroken as e:
            return _error("launch_tampered", e, self.path)
        except BaseException as e:
            return _error(_classify(e), e, self.path)
        finally:
            twin_stats = twins.end() if twins is not None else None
            if twins is not None:
                timer.extra_lead(twins.lead_us())
        handlers = self._handler_error("in a call")
        if handlers is not None:
            return handlers
        flags_ok = (torch.backends.cuda.matmul.allow_tf32 == self.allow_tf32
                    and torch.backends.cudnn.allow_tf32 == self.allow_tf32)
        stream_ok = self.default_stream is None or torch.cuda.current_stream() == self.default_stream
        reply = {"ok": True, "ms": ms, "wall_ms": wall, "tail_ms": tail, "threads": thread_count(),
                 "flags_ok": flags_ok, "streams": self.streams_created, "stream_ok": stream_ok}
        if audit is not None:
            reply["audit"] = report(audit)
        if twin_stats is not None:
            reply["twins"] = twin_stats
        # Where the runner's own host time went around the timed region (diagnostics of
        # the judge's escape check; untrusted, never decisive): before it, and after it.
        reply["host_ms"] = [(t_timed - t_in) / 1e6, (_perf_ns() - t_done) / 1e6]
        return reply

    def collect(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Returned-output contracts: the last call's outputs into the judge's slots."""
        try:
            return self.returned.collect(self._args(msg["outs"], int(msg.get("buf", 0)))) \
                or {"ok": True}
        except BaseException as e:
            return _error(_classify(e), e, self.path)

    def _graph(self, key: str, fn: Any, args: list[torch.Tensor]) -> Any:
        """CUDA-graph mode (tiny calls): capture the launch once per buffer set, time replays.

        The judge still writes fresh inputs into the same buffers and checks the outputs
        each replay leaves. Streams the capture machinery makes are the harness's own.
        """
        g = self._graphs.get(key)
        if g is None:
            self._harness_streams = True
            try:
                side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    fn(*args)  # warm-up outside capture (JIT compilation, autotuning)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn(*args)
            finally:
                self._harness_streams = False
            self._graphs[key] = g
        return g.replay

    def serve(self) -> None:
        # The reply path is bound here, before the candidate is imported (the first "load"
        # request imports it): these are locals of a running frame, which candidate code
        # cannot rebind, unlike module attributes looked up at call time. The judge still
        # bounds every figure by its own clock.
        recv, send, closed = protocol.recv_any_from_judge, protocol.send_json, protocol.ChannelClosed
        rfd, wfd = self.rfd, self.wfd
        while True:
            try:
                msg = recv(rfd)
            except closed:
                return
            op = msg.get("op")
            if op == "device":  # harness only: the CUDA context, before the setup
                reply = self.device_now()
            elif op == "setup":
                reply = self.setup(msg)
            elif op == "load":
                reply = self.load()
            elif op == "call":
                reply = self.call(msg)
            elif op == "collect":
                reply = self.collect(msg)
            elif op == "exit":
                return
            else:
                reply = {"ok": False, "error": {"code": "protocol", "message": f"unknown op {op!r}"}}
            send(wfd, reply)


def warm_harness(device: str) -> None:
    """Start the threads torch starts lazily (its intra-op pool on the CPU; CUDA's own on a
    GPU) before the candidate is imported, so that the judge's thread count after the setup
    is the harness's whole set: any thread beyond it is the candidate's."""
    x = torch.ones(1 << 16, device=device)
    x.add_(1.0)
    float(x.sum())
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    global _PREPARE_S
    args = runner_arg_parser().parse_args()
    harden.lock_down_runner()  # own uid, no caps, seccomp: before the candidate is imported
    cuinit = driver.start(args.device)  # beside Triton's preparation: no context made
    _PREPARE_S = prepare_triton(args.device)
    extcache.install()  # load_inline keeps its builds for this source's next runners
    driver.wait(cuinit)  # ended before the judge counts this runner's threads
    Runner(args).serve()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
