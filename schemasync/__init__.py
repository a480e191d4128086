"""schemasync package."""
