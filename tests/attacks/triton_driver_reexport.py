# expect: deny triton-driver
"""Reaches Triton's driver through another module's import of it (triton.runtime.jit.driver),
where a rule naming only triton.runtime.driver would not look, and swaps the active driver."""

import triton


class Quiet:
    pass


def launch(x, y, out):
    triton.runtime.jit.driver.set_active(Quiet())
    out.copy_(x)
