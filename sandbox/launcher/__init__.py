"""The uid-0 launcher and the isolation primitives: capabilities, seccomp, the identities
of the principals (judge, runners, problem process), hardening of a fresh process, the spawn
of a principal and its channels (framed pipes, CUDA IPC buffers).
"""
