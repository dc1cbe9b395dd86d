"""The search space: decisions, layer records, architecture strings, JSON."""
