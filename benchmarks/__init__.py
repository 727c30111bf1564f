"""Benchmarks run by hand (not timed tests): they print figures for the closing notes."""
