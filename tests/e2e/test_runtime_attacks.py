"""Every runtime attack in tests/attacks/runtime is stopped by the runtime layers alone.

The static scan is switched off (tests/policies/runtime-only.toml denies nothing), so what
stops each attack here is the sandbox, the judge/runner split or the measurement protocol.
Each case names the stage and the codes the report may show; none may pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.evaluate import EvalRequest, evaluate

from ._backends import backend_or_skip

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
ATTACKS = ROOT / "tests" / "attacks" / "runtime"
RUNTIME_ONLY = str(ROOT / "tests" / "policies" / "runtime-only.toml")

pytestmark = pytest.mark.bwrap

# attack file -> (allowed stages, allowed codes)
CASES: dict[str, tuple[set[str], set[str]]] = {
    "background_thread.py": ({"compile", "correctness", "benchmark"},
                             {"output_untouched", "wrong_values", "background_thread", "work_escaped_timing"}),
    "side_stream.py": ({"compile", "correctness", "benchmark"},
                       {"output_untouched", "wrong_values", "background_thread", "work_escaped_timing"}),
    "lazy_output.py": ({"correctness"}, {"output_untouched"}),
    "unmasked_tail_store.py": ({"correctness"}, {"out_of_bounds_write"}),
    "torch_fallback_in_except.py": ({"compile"}, {"torch_compute_in_launch"}),
    "cache_by_pointer.py": ({"correctness"}, {"wrong_values", "output_untouched"}),
    "cache_by_call_count.py": ({"correctness", "benchmark"}, {"output_untouched"}),
    "batch_and_skip.py": ({"correctness", "benchmark"}, {"output_untouched"}),
    "reuse_freed_memory.py": ({"correctness"}, {"wrong_values", "output_untouched"}),
    "input_mutation.py": ({"compile"}, {"input_mutated"}),
    # On the CPU the judge's clock is the time, so the patch gains nothing; its gross lie is
    # work_escaped_timing, or timing_unreliable when the round trip is too noisy to tell
    # (docker's is): never a pass.
    "timer_patch.py": ({"benchmark"}, {"work_escaped_timing", "timing_unreliable"}),
    "checker_patch.py": ({"correctness"}, {"wrong_values"}),
    "fake_report_print.py": ({"correctness"}, {"wrong_values"}),
    "result_forgery.py": ({"compile", "integrity"}, {"exception", "result_forged", "out_tampered"}),
    "early_exit.py": ({"compile"}, {"early_exit"}),
    "system_exit.py": ({"compile"}, {"early_exit"}),
    # another uid and seccomp: the kill is refused (a shared-uid CUDA run would reach
    # judge_died only through a harness bug)
    "kill_judge.py": ({"compile", "integrity"}, {"exception", "judge_died"}),
    "sigstop_other_runner.py": ({"benchmark"}, {"runner_spawned_process"}),
    # reads nothing of another side: raises its account of refusals in the benchmark
    "read_other_side_source.py": ({"benchmark"}, {"exception"}),
    "ptrace_judge.py": ({"compile"}, {"import"}),
    "tf32_flip.py": ({"compile"}, {"precision_flags_changed"}),
    "infinite_loop_launch.py": ({"correctness"}, {"timeout"}),
    "memory_bomb.py": ({"compile"}, {"memory_limit"}),
    # raises with the hidden shape it saw: redaction is tests/e2e/test_hidden_shapes_e2e.py's
    "raise_with_shapes.py": ({"correctness"}, {"exception"}),
    # writes the hidden dims it saw into the benchmark stage's errors: redaction (taint by
    # time) is tests/e2e/test_numbers_channel_e2e.py's
    "numbers_channel_hidden_dims.py": ({"benchmark"}, {"wrong_values"}),
    # candidate text is data: the candidate's own failure (exit 1), never the host's
    "surrogate_message.py": ({"compile", "correctness"}, {"exception"}),
    "rich_markup_message.py": ({"compile", "correctness"}, {"exception"}),
    "control_chars_message.py": ({"compile", "correctness"}, {"exception"}),
    "forged_runner_reply.py": ({"compile"}, {"protocol_violation"}),
    # kernel-only: the launcher's host code gets decoys, only kernels see the judge's tensors
    "host_numpy_view.py": ({"correctness"}, {"output_untouched", "wrong_values"}),
    "host_copy_round_trip.py": ({"correctness"}, {"output_untouched", "wrong_values"}),
    "host_tolist_copy_kernel.py": ({"correctness"}, {"output_untouched", "wrong_values"}),
    "kernel_leaks_inputs_to_host.py": ({"correctness"}, {"output_untouched", "wrong_values"}),
    "dispatch_disabled.py": ({"correctness"}, {"output_untouched", "wrong_values"}),
    "mode_stack_popped.py": ({"correctness"}, {"output_untouched", "wrong_values", "op_audit_tampered"}),
    "helper_thread_torch_op.py": ({"correctness"}, {"output_untouched", "wrong_values",
                                                    "background_thread"}),
    # the twin boundary (sandbox/runner/boundary.py): Triton's callbacks into candidate code
    # (grid, pre-run hooks, launch metadata, argument conversions) run on the decoys only
    "grid_callable_computes.py": ({"compile", "correctness"}, {"output_untouched", "wrong_values"}),
    "pre_run_hook_computes.py": ({"compile", "correctness"}, {"output_untouched", "wrong_values"}),
    "launch_metadata_hook.py": ({"compile", "correctness"}, {"output_untouched", "wrong_values"}),
    "index_argument_walks_frames.py": ({"compile", "correctness"}, {"output_untouched", "wrong_values"}),
    "tuple_argument_of_object.py": ({"compile"}, {"kernel_argument_unsupported"}),
    "patch_triton_launch.py": ({"compile"}, {"launch_tampered"}),
    # the judge's views found through gc: a scalar read of them is compute all the same
    "gc_finds_kernel_tensors.py": ({"compile", "correctness"}, {"torch_compute_in_launch"}),
    # a thread the harness did not make is counted against the runner's pre-import threads
    "import_thread_deferred.py": ({"compile"}, {"background_thread"}),
    # a runner that SIGKILLs itself on a hidden shape would read as killed from outside
    # (runner_killed, retried): the seccomp filter refuses every route, the outputs stay untouched
    **{f"self_sigkill_{route}.py": ({"correctness"}, {"output_untouched"}) for route in (
        "signals", "clone_exit_signal", "pdeathsig", "sigio", "posix_timer", "mq_notify",
        "cpu_limit", "strict_seccomp", "pty_signal")},
    # work between calls: a handler that computes the next answer while the runner waits.
    # Arming its trigger is refused by seccomp (the import fails); a handler the candidate
    # installs anyway is refused by the judge's read of SigCgt (signal_handler)
    "between_calls_setitimer.py": ({"compile"}, {"import", "signal_handler"}),
    "between_calls_sigaction_ctypes.py": ({"compile"}, {"signal_handler"}),
    "between_calls_sigio.py": ({"compile"}, {"signal_handler"}),
    # SIGINT (caught by Python already) re-pointed, the runner's own check fooled: the helper
    # that sends it is a process beside the timed call
    "between_calls_child_signals.py": ({"compile", "correctness", "benchmark"},
                                       {"work_between_calls", "runner_spawned_process"}),
}
LIMITS = {"compile_s": 60, "run_s": 20, "memory_mib": 1536}


def test_every_runtime_attack_has_a_case() -> None:
    assert {p.name for p in ATTACKS.glob("*.py")} == set(CASES)


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_runtime_attack_is_stopped_with_its_stage_and_code(name: str, backend: str) -> None:
    stages, codes = CASES[name]
    report = evaluate(EvalRequest.from_paths(task_dir=TASK, candidate=ATTACKS / name,
                                             backend=backend_or_skip(backend), device="cpu",
                                             policy=RUNTIME_ONLY, limits=dict(LIMITS)))
    assert not report.ok, report.model_dump_json(indent=1)
    first = report.errors[0]
    assert first.stage in stages and first.code in codes, (
        f"{name}: got {first.stage}/{first.code}: {first.message}")


@pytest.mark.parametrize("name", ["between_calls_setitimer.py", "between_calls_sigaction_ctypes.py"])
def test_work_between_calls_is_not_accepted_against_an_honest_current_best(name: str) -> None:
    """Without the defences both were accepted (0.07-0.1 ms against ~38 ms, 25 pairs)."""
    report = evaluate(EvalRequest.from_paths(task_dir=TASK, candidate=ATTACKS / name,
                                             current=TASK / "candidates" / "good.py",
                                             backend=backend_or_skip("bwrap"), device="cpu",
                                             policy=RUNTIME_ONLY, limits=dict(LIMITS)))
    assert not report.ok and (report.acceptance is None or not report.acceptance.accepted)
    first = report.errors[0]
    assert (first.stage, first.code) in {("compile", "import"), ("compile", "signal_handler")}, (
        f"{name}: got {first.stage}/{first.code}: {first.message}")
