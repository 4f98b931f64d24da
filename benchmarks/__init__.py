"""Performance benchmarks: scripts that print measured cycle counts and ratios."""
