"""Compile once per source, torch extensions: a ``load_inline`` build kept by its arguments.

torch builds an inline extension in a folder under the runner's HOME, whose path differs
for every runner (its uid, a random name), and ninja rebuilds whatever path changed; so the
harness keeps the product, not the build folder. Before the candidate is imported,
:func:`install` arranges that ``torch.utils.cpp_extension.load_inline`` is wrapped when that
module is first imported (importing it ahead would cost every runner ~30 ms): a call whose
arguments (with torch's, CUDA's and Python's versions and the device's compute capability)
hash to a kept build imports that build's module; a call that built one keeps its module in
``$HOME/builds/ext/<hash>/`` for the judge to copy out (``sandbox.launcher.builds``).

The judge stages in only the builds of this very source (the host keys its cache by the
source's hash), so a runner never loads another source's build; what this source kept, it
could have built itself. It is an optimisation only: a call the wrapper cannot key (a build
folder of its own, a non-module build), a kept build that does not load, or a candidate
that goes around the wrapper builds as before.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

MODULE = "torch.utils.cpp_extension"
SUFFIX = ".so"


def ext_dir() -> str:
    return os.path.join(os.environ.get("HOME", "/nonexistent"), "builds", "ext")


def build_key(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The hash a build is kept under, or None for a call kept by nobody."""
    if kwargs.get("build_directory") is not None or kwargs.get("is_python_module", True) is not True \
            or kwargs.get("is_standalone"):
        return None
    cap: Any = None
    cuda = bool(kwargs.get("cuda_sources") or (len(args) > 1 and args[1]) or kwargs.get("with_cuda"))
    if cuda and torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
    blob = repr((name, args, sorted(kwargs.items()), torch.__version__, torch.version.cuda,
                 sys.version, cap, os.environ.get("TORCH_CUDA_ARCH_LIST")))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _load(path: str) -> ModuleType:
    """Import the extension module at ``path`` (as torch imports the one it builds)."""
    name = os.path.basename(path)[:-len(SUFFIX)]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kept(key: str) -> str | None:
    folder = os.path.join(ext_dir(), key)
    with contextlib.suppress(OSError):
        found = [f for f in os.listdir(folder) if f.endswith(SUFFIX)]
        if len(found) == 1:
            return os.path.join(folder, found[0])
    return None


def _keep(key: str, module: ModuleType) -> None:
    src = getattr(module, "__file__", None)
    if not isinstance(src, str) or not src.endswith(SUFFIX):
        return
    folder = os.path.join(ext_dir(), key)
    with contextlib.suppress(OSError):
        os.makedirs(folder, 0o700, exist_ok=True)
        tmp = os.path.join(folder, ".partial")
        shutil.copyfile(src, tmp)
        os.replace(tmp, os.path.join(folder, os.path.basename(src)))


def wrap(load_inline: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(load_inline)
    def kept_load_inline(name: str, *args: Any, **kwargs: Any) -> Any:
        key = build_key(name, args, kwargs)
        if key is None:
            return load_inline(name, *args, **kwargs)
        path = _kept(key)
        if path is not None:
            try:
                return _load(path)
            except Exception:  # an unusable build: build it again
                pass
        module = load_inline(name, *args, **kwargs)
        if isinstance(module, ModuleType):
            _keep(key, module)
        return module

    kept_load_inline.__kgrader_kept__ = True  # type: ignore[attr-defined]
    return kept_load_inline


class _Hook(importlib.abc.MetaPathFinder):
    """Wraps ``load_inline`` right after ``torch.utils.cpp_extension`` executes, once."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_and_wrap(module: Any) -> None:
            run(module)
            with contextlib.suppress(AttributeError):
                module.load_inline = wrap(module.load_inline)

        loader.exec_module = exec_and_wrap  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Arrange the wrap before any candidate code runs (harness code, in the runner)."""
    mod: Any = sys.modules.get(MODULE)
    if mod is not None:
        if not getattr(mod.load_inline, "__kgrader_kept__", False):
            mod.load_inline = wrap(mod.load_inline)
        return
    sys.meta_path.insert(0, _Hook())
