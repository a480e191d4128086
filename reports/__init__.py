"""What people look at: per-run plots, report.html with a picture per anomaly, the per-process
timeline.html, junit.xml, the store browser, nightly trends.

Inputs are only the run directory contract (history.md) and results.json (anomalies.md).
"""
