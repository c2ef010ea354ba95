"""``kgrader image build`` / ``kgrader sandbox cleanup`` and the build context, no daemon."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import grader.backends.docker.images as images
from grader.backends.docker.images import BuildRequest, content_hash, prepare_context
from grader.cli.docker import register
from grader.errors import InfrastructureError


def _cli() -> click.Group:
    @click.group()
    def cli() -> None:
        pass

    register(cli)
    return cli


def test_register_adds_image_build_and_sandbox_cleanup() -> None:
    cli = _cli()
    image = cli.commands["image"]
    sandbox = cli.commands["sandbox"]
    assert isinstance(image, click.Group) and "build" in image.commands
    assert isinstance(sandbox, click.Group) and "cleanup" in sandbox.commands


def test_build_error_is_one_line_on_stderr_with_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_daemon() -> None:
        raise InfrastructureError("cannot reach dockerd: gone", hint="start it")

    monkeypatch.setattr(images, "connect", no_daemon)
    result = CliRunner().invoke(_cli(), ["image", "build", "--flavor", "cuda"])
    assert result.exit_code == 2
    assert result.stderr.startswith("infrastructure error: cannot reach dockerd")
    assert "Traceback" not in result.output


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "sandbox" / "__pycache__").mkdir(parents=True)
    (tmp_path / "sandbox" / "judge.py").write_text("J = 1\n")
    (tmp_path / "sandbox" / "__pycache__" / "judge.cpython-311.pyc").write_bytes(b"x")
    (tmp_path / "Dockerfile.cuda").write_text("ARG BASE_IMAGE=some/base:1\nFROM ${BASE_IMAGE}\n")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "torch-2.13.0-cp311-none-any.whl").write_bytes(b"w")
    return tmp_path


def test_context_holds_only_dockerfile_harness_and_wheels(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    req = BuildRequest(flavor="cpu", repo_root=repo, wheels=repo / "wheels")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    prepare_context(req, repo / "wheels", ctx)
    got = sorted(p.relative_to(ctx).as_posix() for p in ctx.rglob("*") if p.is_file())
    assert got == ["Dockerfile", "sandbox/judge.py", "wheels/torch-2.13.0-cp311-none-any.whl"]
    assert req.effective_base == "kgrader/base:bookworm"
    assert BuildRequest(flavor="cuda", repo_root=repo).effective_base == "some/base:1"


def test_content_hash_follows_harness_and_base_but_not_caches(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    req = BuildRequest(flavor="cpu", repo_root=repo)
    h0 = content_hash(req, repo / "wheels", "sha256:a")
    (repo / "sandbox" / "__pycache__" / "x.pyc").write_bytes(b"y")
    assert content_hash(req, repo / "wheels", "sha256:a") == h0
    assert content_hash(req, repo / "wheels", "sha256:b") != h0
    (repo / "sandbox" / "judge.py").write_text("J = 2\n")
    assert content_hash(req, repo / "wheels", "sha256:a") != h0


def test_sandbox_cleanup_removes_dead_owners_folders_and_keeps_live_and_unmarked(
    tmp_path: Path,
) -> None:
    from grader.backends.cleanup import OWNER_FILE, mark_kept, mark_owner

    dead, live, kept, unmarked, other = (tmp_path / f"kgrader-eval-{n}" for n in
                                         ("dead", "live", "kept", "unmarked", "x"))
    for d in (dead, live, kept, unmarked):
        d.mkdir()
    (dead / OWNER_FILE).write_text(json.dumps({"owner": f"{socket.gethostname()}:1:12.00"}))
    (dead / "out").mkdir()
    (dead / "out" / ".judge-secret.json").write_text("{}")
    mark_owner(live)
    mark_owner(kept)
    mark_kept(kept)
    other.symlink_to(dead)  # a link is never followed nor removed
    result = CliRunner().invoke(
        _cli(), ["sandbox", "cleanup", "--temp-dir", str(tmp_path), "--no-docker", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["folders_removed"] == [str(dead)]
    assert not dead.exists() and live.is_dir() and kept.is_dir() and unmarked.is_dir()
    assert other.is_symlink()
    assert report["docker"] == "not checked"
