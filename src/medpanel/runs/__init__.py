"""Benchmark runs: the SQLite store, the concurrent resumable runner, and summaries."""
