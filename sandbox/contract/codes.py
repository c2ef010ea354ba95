"""Every error code kgrader returns: its stage(s), whose fault it can be, what it means.

isolate's man page lists every meta key and exit status it can return, so a caller never
meets a code the document does not define; this module is that list for kgrader. Both
sides import it (standard library only): the judge refuses to create a code it does not
define (:class:`sandbox.contract.failure.StageFailure`), and takes a failure's origin from here
when the code can have only one; the host refuses a record holding an unknown code, the
report's JSON Schema enumerates :func:`report_codes`, ``docs/errors.md`` is :func:`markdown`
(``python3 scripts/errors_doc.py``), and ``tests/unit/test_error_catalogue.py`` walks
``grader/`` and ``sandbox/`` for every code created anywhere, and for entries nobody creates.

Every fact about a code is on its entry (:class:`sandbox.contract.code_entry.Code`: timing
verdict, disqualifying, retried, whose fault, HTTP status, exit code); the consumers read
the derived sets below (:data:`TIMING_CODES`, :data:`VIOLATION_CODES`,
:data:`RETRIED_CODES`) or :func:`retried`, never a list of their own.

Codes of the ``scan`` stage are not listed: they are rule ids (kebab-case, never one of
these), the policy's (``policies/*.toml``) or the scanner's own (``syntax-error``,
``too-complex``, ``module-not-allowed`` and the other allow-list denials).
"""

from __future__ import annotations

from sandbox.contract.code_entry import CURRENT as CURRENT
from sandbox.contract.code_entry import RULE_ID as RULE_ID
from sandbox.contract.code_entry import Blame as Blame
from sandbox.contract.code_entry import Code as Code
from sandbox.contract.code_entry import Stage as Stage
from sandbox.contract.code_entry import UnknownCode as UnknownCode
from sandbox.contract.code_entry import Where as Where
from sandbox.contract.code_entry import api_code as _api
from sandbox.contract.code_entry import host_code as _host
from sandbox.contract.code_entry import page

_RUN: tuple[Stage, ...] = ("compile", "correctness", "benchmark", "accept")
_CALLS: tuple[Stage, ...] = ("correctness", "benchmark", "accept")
_C: tuple[Blame, ...] = ("candidate",)
_I: tuple[Blame, ...] = ("infrastructure",)
_U: tuple[Blame, ...] = ("usage",)


CATALOGUE: tuple[Code, ...] = (
    # ---- compile: importing the candidate ------------------------------------------------
    Code("syntax", ("compile", "accept"), _C, "The candidate file does not parse as Python.",
         "Fix the syntax error at the reported line.", runner=True),
    Code("import", ("compile", "accept"), _C,
         "Importing the candidate raised (a missing module, an error at module level).",
         "Import only what the policy allows; run the module's top level locally.", runner=True),
    Code("missing_entrypoint", ("compile", "accept"), _C,
         "The candidate module does not define the task's entry point.",
         "Define the function the task names (kgrader describes the task).", runner=True),
    Code("compile_timeout", ("compile", "accept"), _C,
         "Importing, JIT-compiling or autotuning ran past the compile time limit.",
         "Use fewer autotune configurations or a smaller unrolled body.", timing=True),
    # ---- the candidate's calls -----------------------------------------------------------
    Code("exception", _RUN, _C, "A call into the candidate raised an exception.",
         "Read the message and line; reproduce with the reported shape.", runner=True),
    Code("timeout", _RUN, _C, "The candidate's calls ran past the stage's time limit.",
         "Look for a hang, a huge grid or an O(n^2) loop.", timing=True),
    Code("memory_limit", _RUN, _C, "The sandbox's memory limit was reached.",
         "Avoid large temporaries and host copies.", runner=True),
    Code("gpu_memory_limit", _RUN, _C, "The GPU memory limit was reached.",
         "Avoid large device temporaries.", runner=True),
    Code("pids_limit", _RUN, _C, "The process/thread limit was reached.",
         "A kernel must not start processes or threads.", runner=True, disqualifying=True),
    Code("disk_limit", _RUN, _C, "The scratch disk or file-size limit was reached.",
         "Do not write files beyond small caches.", runner=True, disqualifying=True),
    Code("output_limit", _RUN, _C, "The sandbox's output (stdout/stderr) cap was reached.",
         "Do not print from the kernel or its wrapper.", disqualifying=True),
    Code("signal", _RUN, _C, "The candidate's runner was killed by a signal (a crash).",
         "Look for an invalid memory access or an abort in native code."),
    Code("runner_killed", _RUN, _I,
         "A runner was killed by SIGKILL from outside the sandbox (an operator, a watchdog): "
         "the judge did not send it, the runner's seccomp filter refuses every self-inflicted "
         "SIGKILL, and the sandbox's memory cgroup counted no OOM kill.",
         "Retry; find what on the host sends signals to kgrader's sandboxes."),
    Code("early_exit", _RUN, _C,
         "The candidate's runner exited before answering (os._exit, sys.exit, a crash).",
         "Never exit from the candidate; return from the entry point.", runner=True),
    Code("protocol", _RUN, _C, "The runner was asked for something it does not serve.",
         "Nothing the candidate can do: report it if it persists.", runner=True),
    Code("protocol_violation", _RUN, _C,
         "The runner's answer was malformed or forged (the harness never sends one).",
         "Do not write to the harness's pipes or patch its reply.", disqualifying=True),
    Code("kernel_argument_unsupported", _RUN, _C,
         "A kernel argument, grid or hook the harness cannot hand to a kernel (kernel-only tasks).",
         "Pass tensors, numbers, dtypes, constexprs, tuples or namedtuples of those, or Triton's "
         "TensorDescriptor; make the grid a tuple of integers or a callable returning one.",
         runner=True),
    Code("launch_tampered", _RUN, _C,
         "The candidate replaced part of Triton's launch path after the harness sealed it.",
         "Launch kernels through Triton's own API; do not patch Triton.", runner=True),
    Code("mode_left_active", _CALLS, _C,
         "The call left a torch mode, trace hook or similar installed after returning.",
         "Do not leave dispatch modes or hooks installed.", runner=True),
    Code("output_shape_mismatch", _CALLS, _C,
         "A returned output has the wrong type, shape, dtype or device.",
         "Return exactly the outputs the task names, of their declared shapes and dtypes.",
         runner=True),
    Code("op_audit_tampered", _RUN, _C, "The candidate interfered with the harness's op audit.",
         "Do not touch torch's dispatcher, modes or the harness.", runner=True, disqualifying=True),
    # ---- correctness ---------------------------------------------------------------------
    Code("wrong_values", _CALLS, _C, "An output differs from the reference beyond the tolerance.",
         "Compare with the reference at the reported index and shape."),
    Code("output_untouched", _CALLS, _C, "An output was not written (it still holds the poison).",
         "Write every element of every output, on every call."),
    Code("check_failed", _CALLS, _C, "The problem's own checker rejected the outputs.",
         "Read the checker's message; it decides values and dtypes for this task."),
    Code("input_mutated", _CALLS, _C, "The candidate changed an input it may only read.",
         "Do not write to inputs.", disqualifying=True),
    Code("out_of_bounds_write", _CALLS, _C, "The candidate wrote outside its outputs (guard bands).",
         "Mask loads and stores at the edges of every shape.", disqualifying=True),
    Code("out_of_bounds_access", ("correctness",), _C,
         "The memory checker found an invalid or misaligned access.",
         "Mask the reported kernel's accesses; the finding names the address.", disqualifying=True),
    Code("shared_memory_race", ("correctness",), _C, "The memory checker found a shared-memory race.",
         "Synchronise the reported kernel's shared-memory accesses."),
    Code("side_stream", _CALLS, _C, "The candidate launched work on another CUDA stream.",
         "Launch on the current stream only.", disqualifying=True),
    Code("torch_compute_in_launch", _CALLS, _C,
         "torch computed inside a launch of a kernel-only task.",
         "Compute in your own kernels; torch may only allocate and view.", disqualifying=True),
    Code("precision_flags_changed", _CALLS, _C, "The candidate changed TF32 or precision flags.",
         "Leave torch's precision settings as they are.", disqualifying=True),
    # ---- timing --------------------------------------------------------------------------
    Code("timing_inconsistent", _CALLS, _C,
         "The runner's timing claims contradict the judge's own clock.",
         "Do not touch timers, events or synchronisation.", timing=True, disqualifying=True),
    Code("work_escaped_timing", ("benchmark", "accept"), _C,
         "Work ran outside the timed region (side stream, thread, deferred work).",
         "Finish all work inside the call, on the current stream.",
         timing=True, disqualifying=True),
    Code("work_deferred_to_copy", _CALLS, _C,
         "Work was deferred past the timed call into the copy of the returned outputs.",
         "Return plain, finished tensors.", timing=True),
    Code("timing_unreliable", _CALLS, _I,
         "The host was too loaded to bound the timing; no verdict on the candidate.",
         "Run again on a quieter machine."),
    Code("below_roofline_floor", ("benchmark",), _C,
         "The measured time beats the task's physical floor: it cannot be real.",
         "Make sure the kernel computes every output on every call.",
         timing=True, disqualifying=True),
    Code("background_thread", _RUN, _C, "The candidate's runner has threads of its own.",
         "Do not start threads, at import or in a call.", disqualifying=True),
    Code("runner_spawned_process", _RUN, _C, "A process runs under the runner's uid beside it.",
         "Do not start processes.", disqualifying=True),
    Code("work_between_calls", _RUN, _C,
         "The runner used CPU between its reply and the next request, or while the judge wrote "
         "the inputs: candidate code (a signal handler, a timer, a finaliser) ran between calls.",
         "Do all work inside the call; arm no timers or signal handlers."),
    Code("signal_handler", _RUN, _C,
         "The candidate installed a signal handler (seen by the kernel's mask of caught "
         "signals, or by the runner): a handler runs code between calls, outside the timing.",
         "Install no signal handlers; do all work inside the call.", runner=True),
    Code("gpu_busy_between_calls", ("accept",), _C,
         "The device stayed busy after a side's call returned (work left running).",
         "Finish all work inside the call.", timing=True),
    # ---- the harness, the task or the machine ----------------------------------------------
    Code("foreign_gpu_process", _RUN, _I,
         "Another job computed on the sandbox's GPU during the run (seen by the host's NVML, or "
         "a compute process the sandbox cannot account for): no timing verdict or acceptance "
         "decision stands on it.",
         "Retry; an operator should give each sandbox a GPU of its own.", current=False),
    Code("device_out_of_memory", ("sandbox", *_RUN), _I,
         "The GPU ran out of memory in the judge or the problem process (its buffers, inputs, "
         "reference or checker): the device is full or shared with another job. The message "
         "names what was asked, what was free and who held the rest. A candidate's runner "
         "over its own share is gpu_memory_limit instead.",
         "Retry when the GPU has room; an operator should give each sandbox a GPU of its own.",
         current=False),
    Code("harness_timeout", ("sandbox", *_RUN), _I,
         "The stage's budget ran out in the harness's own work (a loaded host).",
         "Run again; raise the limit if the host is slow."),
    Code("reference_failed", ("sandbox",), _I,
         "The task's reference, input generator or problem code failed.",
         "Fix the task (kgrader tasks check); the candidate is not to blame."),
    Code("needs_cuda", ("sandbox",), _I, "The problem's code needs a CUDA device, run on the CPU.",
         "Grade (or check the task) with --device cuda on a GPU host.", where=("report", "host")),
    Code("unsupported_dtype", ("sandbox",), _I, "The problem made a tensor of a dtype kgrader lacks.",
         "Change the task's dtypes (kgrader tasks check)."),
    Code("runner_setup_failed", ("sandbox",), _I,
         "The runner harness failed before the candidate was loaded.",
         "Check the sandbox's stderr; an operator fault."),
    Code("runner_isolation_unavailable", ("sandbox",), _I,
         "A runner could not get its own uid, seccomp filter or process view.",
         "Run kgrader's launcher as root with the set-up's runner uids (README)."),
    Code("bad_request", ("sandbox",), _I,
         "The judge was given a request it cannot use (the API: an HTTP request it cannot use).",
         "In a report a host/judge bug: report it; from the API: fix the request.",
         where=("report", "api"), current=False, http=400),
    Code("judge_error", ("sandbox",), _I, "The judge itself failed (a kgrader bug).",
         "Report it with the sandbox's stderr.", current=False),
    Code("judge_setup_failed", ("sandbox",), _I, "The judge could not prepare the evaluation.",
         "Check the sandbox's stderr.", current=False),
    Code("calibration_failed", ("sandbox",), _I, "A calibration run of the judge failed.",
         "Check the sandbox's stderr.", current=False),
    Code("missing_dependency", ("sandbox",), _I, "The sandbox's Python lacks torch or Triton.",
         "Install them for the interpreter kgrader runs with.", current=False),
    Code("gate_failed", ("sandbox",), _I, "The judge could not wait for its turn at the device.",
         "An operator fault: check the leaderboard's gate.", current=False),
    Code("wire_mismatch", ("sandbox",), _I,
         "Host and judge speak different versions of the wire contract.",
         "Rebuild the image or reinstall kgrader so both sides match.", current=False),
    # ---- integrity: the host's reading of the record --------------------------------------
    Code("out_tampered", ("integrity",), _C, "Files were planted in the judge's output folder.",
         "Do not write outside the scratch space.", current=False, disqualifying=True),
    Code("judge_died", ("integrity",), _C,
         "The judge ended without a verified result: a runner killed it or its sandbox.",
         "Do not signal, starve or kill other processes.", current=False),
    Code("judge_killed", ("sandbox",), _I,
         "The judge was stopped from outside the sandbox: killed by a signal an operator or "
         "a daemon sent (no limit fired, the kernel counted no OOM kill, nothing inside can "
         "signal the judge), or ended because the host's tether to it closed.",
         "Retry; find what on the host sends signals to kgrader's sandboxes.", current=False),
    Code("result_missing", ("integrity",), _C,
         "No result record; reported as judge_died or as the limit that fired.",
         "See judge_died.", current=False),
    Code("result_unreadable", ("integrity",), _C, "The result record is not a plain file.",
         "Do not touch the judge's output folder.", current=False),
    Code("result_too_large", ("integrity",), _C, "The result record exceeds its size cap.",
         "Do not touch the judge's output folder.", current=False),
    Code("result_forged", ("integrity",), _C, "The result record failed authentication.",
         "Do not write result files.", current=False),
    Code("result_malformed", ("integrity", "sandbox"), ("candidate", "infrastructure"),
         "The result record is not valid: forged (candidate) or a judge bug (infrastructure).",
         "Do not write result files; an authentic one is a kgrader bug to report.", current=False),
    # ---- host: nothing was graded ------------------------------------------------------------
    _host("error", _U, "A kgrader error of no more specific kind.", "Read the message."),
    _host("usage", _U, "The command's arguments cannot be used.", "See the command's --help."),
    _host("bad_task", _U, "The task folder or task.json is malformed.", "Fix the task file."),
    _host("unsafe_problem_path", _U, "An imported problem's path leaves its folder.",
          "Keep every file the problem names inside its folder."),
    _host("check_limit", _U, "A task check or import ran into a sandbox limit (memory, wall, "
          "processes); the message names it and its figure.",
          "Raise it: --memory-mib, or the limits in task.json."),
    _host("needs_device", _I, "The problem needs CUDA and the check runs on another device.",
          "Import or check it with --device cuda on a GPU host."),
    _host("bad_candidate_file", ("candidate",),
          "The candidate file is missing, empty, binary, not UTF-8 or too large.",
          "Give a readable UTF-8 source file."),
    _host("bad_current_file", _U,
          "The current best's file (--current) is missing, empty, binary, not UTF-8 or too "
          "large.", "Give the current best's readable UTF-8 source file."),
    _host("bad_policy", _U, "The policy file is malformed or names something unknown.",
          "Fix the policy file (policies/ has examples)."),
    _host("bad_output_path", _U, "An output path is unsafe or not a plain folder.",
          "Give a plain directory you own."),
    _host("bad_out_dir", _U, "The sandbox's output folder is not a plain directory.",
          "Give a plain directory."),
    _host("bad_backend", _U, "No such sandbox backend.", "Use auto or one of the registered backends the message lists."),
    _host("no_gpu_ids", _U, "A GPU evaluation was asked for without GPU ids.",
          "Pass --gpu-ids."),
    _host("bad_gpu_id", _U, "A GPU id is unknown, repeated or wrong for the device.",
          "Pass the ids of this host's GPUs."),
    _host("no_wheels", _U, "No wheels were found for the image build.",
          "Point the build at a folder of *.whl files."),
    _host("no_harness", _U, "The image build found no sandbox/ package.",
          "Build from kgrader's source tree."),
    _host("bad_workspace", _U, "The agent tools' workspace is unusable.", "Fix the workspace."),
    _host("bad_argument", _U, "A tool call's arguments do not match its schema (the caller's "
          "fault, not the candidate's).", "Call the tool with the arguments its schema names."),
    _host("unknown_tool", _U, "A call of an agent tool that does not exist.",
          "Call one of the tools `kgrader tools schema` lists."),
    _host("bad_advice_table", _U, "The diagnostics advice table is malformed.",
          "Fix the advice table."),
    _host("experience_store", _U, "The experience store cannot be used.",
          "Check the store's path."),
    _host("experience_schema", _U, "The experience store's schema is of another version.",
          "Use a fresh store or the kgrader that made it."),
    _host("bad_dim_filter", _U, "A dims filter of an experience query is malformed.",
          "Give dims as name=value pairs."),
    _host("state_locked", _U, "Another leaderboard run holds the state.",
          "Wait for it to finish."),
    _host("state_schema", _U, "The leaderboard state is of another version.",
          "Use a fresh state or the kgrader that made it."),
    _host("seed_secret_mismatch", _U, "A leaderboard state was graded on other secret seeds "
          "than the secret given now (a resumed run, or a replay).",
          "Pass the --seed-secret the state was graded with, or a new --state."),
    _host("replay_mismatch", _U, "What a replay was asked to re-grade is not what was recorded "
          "(another file, task or job).",
          "Point replay at the recorded submission's file and task folder."),
    _host("address_unavailable", _U, "`kgrader serve` cannot listen on --host:--port: the port "
          "is in use, the address is not this machine's, or it is a privileged port.",
          "Stop what holds the port, or pick another --port (0: any free one)."),
    _host("service_unreachable", _I, "The grading service did not answer (refused, reset, "
          "timed out or a 5xx), for longer than a waiting client retries.",
          "Check --server; a submitted job is kept by the server: `kgrader status ID`."),
    _host("interrupted", _U, "The command was stopped by SIGINT or SIGTERM.",
          "Run it again.", retried=True),
    _host("infrastructure", _I, "kgrader or the machine failed.", "Read the message; retry."),
    _host("sandbox_unavailable", _I, "The selected backend cannot start a sandbox here.",
          "Install bubblewrap or start dockerd (scripts/setup.sh)."),
    Code("disk_full", ("sandbox",), _I,
         "The host's temporary folder (TMPDIR) is full, missing or not writable: no evaluation "
         "folder fits, or the judge could not write its record there.",
         "Free space there, or point TMPDIR at a folder with room; then retry.",
         where=("host", "report"), current=False),
    _host("image_missing", _I, "The docker image is not present (kgrader never pulls).",
          "Build it: kgrader docker build."),
    _host("image_build_failed", _I, "Building the docker image failed.",
          "Read docker's output in the message."),
    _host("ray_cluster_lost", _I, "The Ray cluster (a leaderboard run's, or the service's "
          "workers') went away.",
          "Restart the cluster; resume the run (the service reconnects by itself)."),
    _host("internal", _I, "A kgrader bug (the CLI, or the API's HTTP 500).",
          "Set KGRADER_DEBUG=1 (the server logs it) and report it.", ("host", "api"), http=500),
    _host("internal_error", _I, "A kgrader bug (the MCP server).",
          "The traceback is on the server's stderr: report it."),
    # ---- the grading service's HTTP API (grader.service): the caller's request ---------------
    _api("unauthenticated", 401, "The request carries no API token (HTTP 401).",
         "Send your token."),
    _api("bad_token", 401, "The API token is unknown, revoked or malformed (HTTP 401).",
         "Ask the operator for a valid token."),
    _api("forbidden", 403, "The token may not do this (HTTP 403).",
         "Use an operator token, or only your own submissions."),
    _api("rate_limited", 429, "Too many requests or submissions per minute (HTTP 429).",
         "Wait for the Retry-After seconds."),
    _api("quota_exceeded", 429, "The token's quota is used up (HTTP 429).", "Ask the operator."),
    _api("not_found", 404, "No such submission, report or page (HTTP 404).",
         "Check the id or path."),
    _api("method_not_allowed", 405, "The path does not take this HTTP method (HTTP 405).",
         "Use the method the API documents."),
    _api("too_large", 413, "The request or the source exceeds its size cap (HTTP 413).",
         "Send a smaller source."),
    _api("unknown_task", 404, "The server grades no such task (HTTP 404).",
         "Pick one of the server's tasks."),
    _api("bad_candidate", 422, "The source is empty, not Unicode text or holds a NUL (HTTP 422).",
         "Send the kernel's UTF-8 source."),
    _host("not_finished", ("usage", "infrastructure"), "The submission has no result yet: the API's HTTP 409, the "
          "client's exit 75 (`kgrader report` on a queued or running job, `kgrader submit` "
          "whose --timeout ran out).", "Ask again later: `kgrader status ID` follows it.",
          ("host", "api"), http=409, exit_code=75),
    _api("already_finished", 409, "The submission finished (or was cancelled) before it could be "
         "cancelled (HTTP 409).", "Nothing to do: read its report."),
)

BY_NAME: dict[str, Code] = {c.name: c for c in CATALOGUE}
RUNNER_CODES: frozenset[str] = frozenset(c.name for c in CATALOGUE if c.runner)
# The facts as sets (derived: a new code's facts are set on its entry, never here).
TIMING_CODES: frozenset[str] = frozenset(c.name for c in CATALOGUE if c.timing)
VIOLATION_CODES: frozenset[str] = frozenset(c.name for c in CATALOGUE if c.disqualifying)
RETRIED_CODES: frozenset[str] = frozenset(c.name for c in CATALOGUE if c.retried)


def lookup(code: str) -> Code:
    """The entry of ``code`` (``current_<name>`` too, where the entry allows it)."""
    entry = BY_NAME.get(code)
    if entry is None and code.startswith(CURRENT):
        entry = BY_NAME.get(code[len(CURRENT):])
        if entry is not None and not entry.current:
            entry = None
    if entry is None:
        raise UnknownCode(f"error code {code[:80]!r} is not in sandbox/contract/codes.py")
    return entry


def is_report_code(code: str) -> bool:
    try:
        return "report" in lookup(code).where
    except UnknownCode:
        return False


def origin_of(code: str, origin: Blame | None = None) -> Blame:
    """The origin of a failure with ``code``: the catalogue's, when the code has one only;
    else ``origin``, which the call site must give. Raises :class:`UnknownCode`."""
    entry = lookup(code)
    if origin is None:
        if len(entry.origins) != 1:
            raise UnknownCode(f"{code} can be {' or '.join(entry.origins)}: say which")
        return entry.origins[0]
    if origin not in entry.origins:
        raise UnknownCode(f"{code} is never {origin} (only {', '.join(entry.origins)})")
    return origin


def is_timing(code: str) -> bool:
    """Whether ``code`` (``current_<name>`` too) is a timing verdict (:attr:`Code.timing`)."""
    return code.removeprefix(CURRENT) in TIMING_CODES


def retried(code: str, origin: str) -> bool:
    """Whether a failure with ``code`` and ``origin`` spoils the evaluation rather than
    decide it: the leaderboard and the service re-run it (:attr:`Code.retried`; only the
    infrastructure's, never a candidate's)."""
    if origin != "infrastructure":
        return False
    entry = BY_NAME.get(code.removeprefix(CURRENT))
    return entry is None or bool(entry.retried)  # an uncatalogued one: as any infra fault


def runner_code(raw: object) -> str:
    """What a runner's own reply may call its failure: a code of its vocabulary, else
    ``exception`` (a runner shares a process with the candidate: its word names no verdict)."""
    return raw if isinstance(raw, str) and raw in RUNNER_CODES else "exception"


def report_codes() -> tuple[str, ...]:
    """Every code a report's error may carry outside the scan stage, sorted."""
    names = [c.name for c in CATALOGUE if "report" in c.where]
    names += [CURRENT + c.name for c in CATALOGUE if "report" in c.where and c.current]
    return tuple(sorted(names))


def markdown() -> str:
    """``docs/errors.md``: the catalogue as a page (``python3 scripts/errors_doc.py``)."""
    return page(CATALOGUE)
