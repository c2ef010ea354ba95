#!/usr/bin/env python3
"""Write docs/errors.md from the error catalogue (sandbox/contract/codes.py).

    python3 scripts/errors_doc.py          # rewrite docs/errors.md
    python3 scripts/errors_doc.py --check  # exit 1 when docs/errors.md is stale

tests/unit/test_error_catalogue.py fails when the page and the catalogue disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox.contract import codes  # noqa: E402  (after the path above)

DOC = ROOT / "docs" / "errors.md"


def main(argv: list[str]) -> int:
    page = codes.markdown() + "\n"
    if argv == ["--check"]:
        if DOC.is_file() and DOC.read_text(encoding="utf-8") == page:
            return 0
        print(f"{DOC.relative_to(ROOT)} is stale: run python3 scripts/errors_doc.py", file=sys.stderr)
        return 1
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    DOC.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
