"""Dotted-name patterns and the builtin namespace, shared by the matchers and the allow-list."""

from __future__ import annotations

import builtins
import re

# Every name the interpreter finds in the builtins namespace, plus the module dunders that
# resolve there or are a side door to it.
BUILTIN_NAMES = frozenset(dir(builtins)) | {"__builtins__", "__loader__", "__spec__"}

# The decorators that make a Triton kernel, and the calls that import, read or set a name
# given as a string.
JIT_DECORATORS = frozenset({
    "triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit",
    "triton.runtime.jit.jit", "triton.runtime.autotune", "triton.runtime.autotuner.autotune",
    "triton.runtime.heuristics",
})
IMPORTERS = frozenset({"__import__", "builtins.__import__", "importlib.import_module"})
GETATTR = frozenset({"getattr", "builtins.getattr"})
ATTR_SETTERS = frozenset({"setattr", "delattr", "builtins.setattr", "builtins.delattr"})

_DUNDER = re.compile(r"__\w+__\Z")


def is_dunder(name: str) -> bool:
    """``__x__`` (the interpreter's special names), not ``_x`` or ``__x``."""
    return len(name) > 4 and _DUNDER.match(name) is not None


class NamePatterns:
    """Exact names plus ``*`` globs (``*`` spans dots)."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.exact = frozenset(p for p in patterns if "*" not in p)
        globs = [p for p in patterns if "*" in p]
        joined = "|".join(".*".join(re.escape(s) for s in g.split("*")) for g in globs)
        self.glob = re.compile(rf"(?:{joined})\Z") if globs else None

    def __bool__(self) -> bool:
        return bool(self.exact) or self.glob is not None

    def match(self, name: str) -> bool:
        return name in self.exact or (self.glob is not None and self.glob.match(name) is not None)
