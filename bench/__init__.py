"""Benchmarks (run as `python -m bench.<name>`); figures for people, not test assertions."""
