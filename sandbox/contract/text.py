"""Text a candidate controls, made safe to record, store and print.

A runner's exception messages and type names, its attribute and file names, what tools
echo of its kernels: all of it is data. It must never break a JSON or pydantic parse
(lone surrogates are not UTF-8), never move a terminal's cursor or colours (ANSI escapes,
``\\r``, NUL, bidi overrides), and never grow without bound. :func:`clean` is the one
rule; the judge applies it where a runner's text enters its record (``sandbox.launcher.proc``,
``sandbox.contract.failure``) and the host again where it reads the record
(``grader.report.record``). Markup (rich's ``[bold]``) is kept literally here: the
renderers escape it, since only they know their markup language.

Standard library only: the host imports this module (like ``sandbox.contract.wire``).
"""

from __future__ import annotations

import math
import re
from typing import Any

MESSAGE_CAP = 4000  # an error message
NAME_CAP = 200  # a type name, a key, a short label
CODE_CAP = 64
ITEMS_CAP = 256  # entries of one list or dict in a detail
DEPTH_CAP = 8

_CODE = re.compile(r"[a-z][a-z0-9_.\-]*")
# Lone surrogates (no UTF-8 form: pydantic and strict encoders refuse them), C0 and C1
# controls and DEL (ANSI escapes, \r, NUL, backspace), and the characters that reorder or
# break a displayed line (bidi embeddings, overrides, isolates and marks; line and paragraph
# separators; the byte-order mark). \n and \t are allowed where ``lines`` is true.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f"
                     "\u2028-\u202e\u2066-\u2069\ufeff]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f"
                          "\u2028-\u202e\u2066-\u2069\ufeff]")
_SURROGATES = (0xD800, 0xDFFF)


def _visible(m: re.Match[str]) -> str:
    code = ord(m.group())
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        return "\ufffd"
    if code == 0x0A:
        return "\\n"
    if code == 0x09:
        return "\\t"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _as_str(value: object) -> str:
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a plain copy: no subclass method runs
    try:
        return str(value)
    except Exception:  # any object's __str__ may fail; the text must not
        return f"<unprintable {type(value).__name__}>"


def clean(value: object, cap: int = MESSAGE_CAP, *, lines: bool = True) -> str:
    """``value`` as safe text: surrogates become U+FFFD, control and reordering characters
    a visible escape (``\\x1b``), at most ``cap`` characters (a cut says how much went).
    ``lines`` keeps newlines and tabs (messages, tracebacks); off, they are escaped too."""
    text = _as_str(value)
    over = len(text) - cap
    if over > 0:
        text = text[:cap]  # bound the work before escaping (an escape is longer)
    text = (_UNSAFE if lines else _UNSAFE_LINE).sub(_visible, text)
    if over > 0 or len(text) > cap:
        cut = max(over, 0) + max(len(text) - cap, 0)
        mark = f"... [{cut} more characters cut]"
        text = text[:max(cap - len(mark), 0)] + mark
    return text


def is_clean(value: str, *, lines: bool = True) -> bool:
    """True when :func:`clean` would change nothing but the length."""
    return (_UNSAFE if lines else _UNSAFE_LINE).search(value) is None


def clean_code(value: object, fallback: str = "exception") -> str:
    """An error code as the record's contract wants it (``[a-z][a-z0-9_.-]*``, at most 64),
    else ``fallback``: a code is a name the catalogue defines, never free text."""
    if type(value) is str and len(value) <= CODE_CAP and _CODE.fullmatch(value):
        return value
    return fallback


def clean_tree(value: Any, cap: int = MESSAGE_CAP, depth: int = DEPTH_CAP) -> Any:
    """A JSON-safe copy of ``value`` (a ``detail`` dict): strings :func:`clean`, keys cleaned
    names, lists and dicts at most :data:`ITEMS_CAP` entries and :data:`DEPTH_CAP` deep,
    non-finite floats and out-of-range integers as text, anything else as its text."""
    if value is None or type(value) is bool:
        return value
    if type(value) is int:
        return value if -(1 << 63) <= value < (1 << 63) else "<integer out of range>"
    if type(value) is float:
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return clean(value, cap)
    if depth <= 0:
        return "<nested too deep>"
    if isinstance(value, dict):
        return {clean(k, NAME_CAP, lines=False): clean_tree(v, cap, depth - 1)
                for k, v in list(value.items())[:ITEMS_CAP]}
    if isinstance(value, list | tuple):
        return [clean_tree(v, cap, depth - 1) for v in list(value)[:ITEMS_CAP]]
    return clean(value, cap)


def clean_strings(value: Any) -> Any:
    """A copy of ``value`` (parsed JSON) with every string and key :func:`clean` of its
    unsafe characters, but never cut and no list shortened: the host's pass over a whole
    record, whose lengths the record's own caps bound."""
    if isinstance(value, str):
        return value if is_clean(value) else _UNSAFE.sub(_visible, value)
    if isinstance(value, dict):
        return {clean_strings(k): clean_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_strings(v) for v in value]
    return value
