"""The report: its model (the one place the JSON shape is defined), reading the judge's
record, building the report from it, and rendering it for people."""
