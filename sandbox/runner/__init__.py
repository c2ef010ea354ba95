"""The runner side: the only code that shares a process with a candidate. Boot, the
command loop, the timer, the kernel-only twins and op audit, the returned-output contract.
"""
