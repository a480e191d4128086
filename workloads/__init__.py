"""workloads package."""
