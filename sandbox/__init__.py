"""Code that runs inside the sandbox: the trusted judge and the runner that hosts the candidate.

Depends on the standard library, torch and triton only. Nothing here may import ``grader``.
"""
