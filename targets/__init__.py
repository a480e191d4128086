"""The databases the harness can test: one folder per target, and the registry that names them."""
