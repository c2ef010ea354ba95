"""An agent-tool workspace: one folder, one fixed task and configuration, one lock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.backends.registry import sorted_choices
from grader.errors import UsageError
from grader.records import Records
from grader.task import TaskSpec, format_validation_error, load_task

CONFIG_NAME = "kgrader.json"
RECORDS_NAME = "records"
LOCK_NAME = ".tool.lock"


if TYPE_CHECKING:
    BackendChoice = str
else:  # the registry's names when this module loads: ``auto``, then alphabetically
    BackendChoice = Literal[sorted_choices()]


class WorkspaceError(UsageError):
    """The workspace folder or its kgrader.json is missing or invalid (the operator's fault)."""

    code = "bad_workspace"


class WorkspaceConfig(BaseModel):
    """``WORKSPACE/kgrader.json``: what the operator fixed for every tool call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str = Field(description="Task folder; relative paths are relative to the workspace.")
    backend: BackendChoice = "auto"
    device: Literal["auto", "cpu", "cuda", "rocm"] = "auto"
    policy: str | None = Field(None, description="Policy name or path; None: the task's.")
    quick_calibration: bool = Field(False, description="measure_peak/profile use the quick calibration.")
    hardware: str | None = Field(None, description="hardware.json path; None: the default.")
    gpu_ids: list[str] = Field(default_factory=list)
    show_reference: bool = Field(True, description="describe_task returns the reference's "
                                 "source (scrubbed of hidden dimension values, else withheld).")
    server: str | None = Field(None, pattern=r"^https?://", description="A kgrader serve URL: "
                               "compile, bench and accept are graded there (the token from "
                               "$KGRADER_TOKEN); None: local sandboxes (grader.agent.remote).")
    server_task: str | None = Field(None, description="The server's name of the task; None: "
                                    "the workspace task's name.")


@dataclass(frozen=True)
class Workspace:
    """An opened, validated workspace."""

    root: Path
    config: WorkspaceConfig
    task_dir: Path
    spec: TaskSpec

    @classmethod
    def open(cls, root: str | Path) -> Workspace:
        """Read and validate ``root/kgrader.json`` and the task it names."""
        base = Path(root).resolve()
        cfg_path = base / CONFIG_NAME
        try:
            config = WorkspaceConfig.model_validate_json(cfg_path.read_bytes())
        except FileNotFoundError:
            raise WorkspaceError(f"{base} is not a workspace (no {CONFIG_NAME})",
                                 hint=f"kgrader workspace init {base} --task TASK_DIR") from None
        except ValidationError as e:
            raise WorkspaceError(f"{cfg_path}: invalid\n{format_validation_error(e)}") from None
        task_dir = (base / config.task).resolve()
        spec, _ = load_task(task_dir)
        return cls(base, config, task_dir, spec)

    @property
    def records(self) -> Records:
        """The workspace's records root (created on first use)."""
        return Records(self.root / RECORDS_NAME)

    @property
    def hardware_path(self) -> Path | None:
        """Where calibrations are cached (None: :func:`grader.measure.peaks.default_path`)."""
        return None if self.config.hardware is None else (self.root / self.config.hardware)


def init_workspace(root: str | Path, task_dir: str | Path, *, backend: str = "auto",
                   device: str = "auto", policy: str | None = None,
                   quick_calibration: bool = False, force: bool = False,
                   server: str | None = None, server_task: str | None = None) -> Workspace:
    """Create ``root/kgrader.json`` naming ``task_dir`` (absolute); refuse to overwrite."""
    base = Path(root).resolve()
    load_task(task_dir)  # a workspace never points at a broken task
    cfg_path = base / CONFIG_NAME
    if cfg_path.exists() and not force:
        raise WorkspaceError(f"{cfg_path} exists; pass force to overwrite it")
    try:
        config = WorkspaceConfig.model_validate(
            {"task": str(Path(task_dir).resolve()), "backend": backend, "device": device,
             "policy": policy, "quick_calibration": quick_calibration,
             "server": server, "server_task": server_task})
    except ValidationError as e:
        raise WorkspaceError(f"invalid workspace settings\n{format_validation_error(e)}") from None
    base.mkdir(parents=True, exist_ok=True)
    tmp = cfg_path.with_name(f".{CONFIG_NAME}.tmp")
    tmp.write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(cfg_path)
    (base / RECORDS_NAME).mkdir(exist_ok=True)
    return Workspace.open(base)


# --- shared plumbing ------------------------------------------------------------------


