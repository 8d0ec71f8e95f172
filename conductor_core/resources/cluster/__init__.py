"""Bundled cluster settings (``default.yaml``), read by ``conductor_core.cluster.settings``."""
