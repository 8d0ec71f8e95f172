"""Helpers shared by tests: tools found or unpacked locally (for example the ``helm`` binary)."""
