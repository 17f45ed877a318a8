"""Scorers: pure functions from an outcome and a reference to numbers."""
