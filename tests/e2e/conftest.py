"""Fixtures of the end-to-end tests shared by more than one module."""

from __future__ import annotations

import pytest

from tests.support.containers import docker_or_skip, image_or_skip


@pytest.fixture(scope="module")
def images():
    """A Docker client of an engine that holds the built base image (skips otherwise)."""
    client = docker_or_skip()
    image_or_skip(client, "base")
    yield client
    client.close()
