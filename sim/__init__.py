"""Deterministic simulation: the schemasync cluster in one process, on virtual time."""
