"""Field formats: each one registered object, in a package of its own (``registry``)."""
