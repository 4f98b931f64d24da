"""Benchmarks: scripts that print measured cycles and ratios (not timed tests)."""
