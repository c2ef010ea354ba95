"""Replacement fields of ``str.format`` templates that walk attributes or items.

``"{0.__init__.__globals__}".format(f)`` and ``"{0[modules]}".format(d)`` read attributes
and items named in *data*, where no rule that matches code can see them; so does
``string.Formatter().get_field``, which even hands the object back. A field that is a bare
index or name (``{}``, ``{0}``, ``{name}``) reads nothing but the argument itself.
"""

from __future__ import annotations

import _string  # the parser str.format itself uses; it parses, it never formats

# str.format expands nested fields in a format spec once ("{0:{1.x}}"); two levels of
# nesting are a ValueError at run time, so a small bound is exact, not a heuristic.
_MAX_DEPTH = 4


def walking_fields(template: str) -> list[str]:
    """Field names in ``template`` (and in nested format specs) that contain ``.`` or ``[``.

    A template that does not parse is returned as one walking field: ``str.format`` would
    already have evaluated the fields before the broken one when it raises.
    """
    found: list[str] = []
    todo = [(template, 0)]
    while todo:
        text, depth = todo.pop()
        if depth > _MAX_DEPTH:
            found.append(text)
            continue
        try:
            parts = list(_string.formatter_parser(text))
        except ValueError:
            found.append(text)
            continue
        for _literal, field, spec, _conversion in parts:
            if field is None:
                continue
            if "." in field or "[" in field:
                found.append(field)
            if spec and "{" in spec:
                todo.append((spec, depth + 1))
    return found
