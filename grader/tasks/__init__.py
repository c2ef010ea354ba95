"""Making and vetting tasks: importers for the field's formats (KernelBench, GPU MODE),
the scaffold of a new task, and ``task check`` (is a task sound before anyone is graded)."""
