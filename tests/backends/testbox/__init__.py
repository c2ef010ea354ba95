"""``testbox``: a real sandbox backend built from the library's bwrap building blocks
under its own name, with its own lifecycle; it exists to show that a backend is one
folder plus one registry line and passes the shipped conformance suite."""
