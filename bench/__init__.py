"""Benchmarks that print figures. The learning experiment harness they share is
``experiment.py`` (``bench.experiment`` from the tests): it trains and measures, and neither
training nor serving uses it."""
