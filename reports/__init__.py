"""What people look at: per-run plots, report.html and junit.xml, the store browser, nightly trends.

Inputs are only the run directory contract (history.md) and results.json (anomalies.md).
"""
