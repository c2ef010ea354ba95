"""Sandbox backends: one interface (:mod:`grader.backends.base`), several implementations."""
