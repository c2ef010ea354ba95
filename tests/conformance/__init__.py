"""Backend conformance suite: one list of tests that every sandbox backend must pass."""
