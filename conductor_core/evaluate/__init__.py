"""Sharded, resumable benchmark evaluation with baselines, statistics and reports."""
