"""Benchmarks: figures printed for people, never pass/fail timings (see bench/README.md)."""
