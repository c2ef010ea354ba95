"""What enforced each limit of one sandboxed run: one typed shape for every backend.

A backend fills an :class:`Enforcement` from what it actually configured for that run
(not from what it would have liked to configure), and the report carries it verbatim, so
each line must be true of the run it describes: the disk line names the filesystems that
bounded writes, their size and inode caps, and the per-file rlimit; the GPU line names the
GPU ids exposed and whether they were chosen by default.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sandbox.contract.wire import Device


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScratchMount(_Frozen):
    """One writable tmpfs inside the sandbox."""

    path: str = Field(description="Mount point inside the sandbox (/tmp, /dev/shm).")
    size_bytes: int = Field(description="tmpfs size= cap: bytes of file data.")
    inodes: int = Field(description="tmpfs nr_inodes= cap: files + folders.")
    options: str = Field(description="The mount options that applied (nosuid, nodev, ...).")


class DiskEnforcement(_Frozen):
    """Everything that bounded what the sandbox could write."""

    mechanism: str = Field(description="Who mounted the scratch filesystems, and how.")
    scratch: tuple[ScratchMount, ...] = Field(description="Each writable tmpfs and its caps.")
    file_size_bytes: int = Field(description="RLIMIT_FSIZE: the largest single file anywhere.")
    out_dir: str = Field(description="What bounds /kg/out, which lies on the host's disk.")
    read_only: str = Field(description="What keeps the rest of the filesystem read-only.")

    def summary(self) -> str:
        mounts = "; ".join(
            f"{m.path} tmpfs size={m.size_bytes >> 20} MiB nr_inodes={m.inodes}"
            for m in self.scratch
        )
        return f"{mounts}; RLIMIT_FSIZE={self.file_size_bytes} bytes ({self.mechanism})"


class GpuEnforcement(_Frozen):
    """Which GPUs the sandbox could open, and why those."""

    device: Device
    ids: tuple[str, ...] = Field(description="GPU ids exposed ('0', a UUID, renderD129).")
    defaulted: bool = Field(
        description="True when the caller named no GPU and the first visible one was used."
    )
    mechanism: str = Field(description="How the device nodes reached the sandbox.")
    device_gids: tuple[int, ...] = Field(
        description="Groups owning non-world-accessible GPU nodes, handed to the launcher "
        "(KGRADER_DEVICE_GIDS) so runner uids can open them."
    )
    memory: str = Field(description="What bounded GPU memory, if anything.")


class Enforcement(_Frozen):
    """How each limit of :class:`grader.limits.Limits` (and each isolation property) was
    enforced in one run. The same keys for every backend."""

    backend: str
    memory: str = Field(description="Host memory (memory == memory+swap) of the whole tree.")
    pids: str = Field(description="Processes + threads of the whole tree.")
    cpu: str = Field(description="CPU quota, or the fact that there was none.")
    wall: str = Field(description="The outer wall-clock limit and who kills on it.")
    disk: DiskEnforcement
    output: str = Field(description="How stdout/stderr were captured and capped.")
    user: str = Field(description="Uids and capabilities of the sandbox's first process.")
    network: str
    seccomp: str
    gpu: GpuEnforcement

    def lines(self) -> dict[str, str]:
        """One human-readable line per concern (for rendering)."""
        g = self.gpu
        gpu = "no GPU" if g.device == "cpu" else (
            f"{g.device} ids {','.join(g.ids)}{' (default: first visible GPU)' if g.defaulted else ''}"
            f" via {g.mechanism}; memory: {g.memory}"
        )
        return {
            "memory": self.memory,
            "pids": self.pids,
            "cpu": self.cpu,
            "wall": self.wall,
            "disk": self.disk.summary(),
            "output": self.output,
            "user": self.user,
            "network": self.network,
            "seccomp": self.seccomp,
            "gpu": gpu,
        }
