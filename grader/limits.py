"""Resource limits applied to one evaluation, shared by every backend."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.errors import UsageError

LimitName = Literal[
    "compile_timeout",
    "timeout",
    "memory_limit",
    "pids_limit",
    "disk_limit",
    "output_limit",
    "gpu_memory_limit",
]


class Limits(BaseModel):
    """What one evaluation may use. Filled from the task, overridable on the CLI."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compile_s: float = Field(120.0, gt=0, le=3600, description="Import + first launch, seconds "
                             "(and again for the runners acceptance opens).")
    run_s: float = Field(300.0, gt=0, le=7200, description="Each run stage (correctness, timing, "
                         "acceptance, its replicate), seconds.")
    memory_mib: int = Field(4096, ge=64, description="Host memory (RSS, memory+swap) of the tree.")
    pids: int = Field(256, ge=16, description="Processes and threads in the sandbox.")
    tmpfs_mib: int = Field(
        256, ge=8, description="Size of each writable scratch tmpfs (/tmp and /dev/shm), MiB."
    )
    tmpfs_inodes: int = Field(
        65536,
        ge=1024,
        le=1 << 24,
        description="Inodes (files + folders) of each scratch tmpfs; bounds a many-empty-files flood.",
    )
    output_bytes: int = Field(
        1 << 20, ge=4096, description="Cap on captured stdout+stderr together; the rest is drained."
    )
    result_bytes: int = Field(8 << 20, ge=4096, description="Cap on the judge's result file.")
    gpu_memory_mib: int | None = Field(
        None, ge=64, description="Per-process GPU memory cap; None: the device's memory."
    )
    cpus: float = Field(2.0, gt=0, description="CPU quota (docker) / affinity hint.")

    @property
    def wall_s(self) -> float:
        """Outer wall limit of the whole sandbox, a net for a judge that hangs: the judge
        bounds each stage itself (compile, then correctness, timing, acceptance and its
        replicate with ``run_s`` each, the two acceptance pairs opening with ``compile_s``
        each), plus start-up slack."""
        return 3 * self.compile_s + 4 * self.run_s + 30.0

    @property
    def file_size_bytes(self) -> int:
        """``RLIMIT_FSIZE`` of the sandbox: no single file larger than a scratch tmpfs or
        than the judge's result file may be (``/kg/out`` lies on the host's disk)."""
        return max(self.tmpfs_mib << 20, self.result_bytes)

    def override(self, **changes: float | int | None) -> Limits:
        """A copy with the non-None values of ``changes`` applied (CLI overrides). A value
        the model refuses is the caller's: :class:`UsageError` naming each, never a raw
        validation error (the CLI's options carry the same bounds: grader.cli.app)."""
        clean = {k: v for k, v in changes.items() if v is not None}
        try:
            return self.model_validate({**self.model_dump(), **clean})
        except ValidationError as e:
            bad = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                            for err in e.errors())
            raise UsageError(f"limits out of range: {bad}") from None
