"""Benchmarks: each module prints a table and writes JSON to benchmarks/results/."""
