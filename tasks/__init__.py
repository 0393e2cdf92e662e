"""Benchmark tasks: registry, loading, prompting, scoring and the code sandbox."""
