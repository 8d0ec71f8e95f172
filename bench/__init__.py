"""Benchmarks that print figures, and the learning experiment harness (bench.learning)."""
