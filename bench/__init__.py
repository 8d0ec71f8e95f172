"""Benchmarks that print figures (the learning experiment harness they share is
``conductor_core.train.experiment``)."""
