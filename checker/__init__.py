"""The checker: a PySpark pipeline that judges a run directory (shared/spec/anomalies.md).

`checker.analyze.analyze_run(run_dir)` writes results.json; `python -m checker RUN_DIR` is the CLI.
"""
