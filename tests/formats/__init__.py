"""Field formats that live only in the tests (each registered by one line where used)."""
