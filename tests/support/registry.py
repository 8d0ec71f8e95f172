"""A container registry on loopback for tests: Debian's ``docker-registry`` (the CNCF
distribution registry) listening on 127.0.0.1 only, a free port, its storage in a test folder, no
authentication (the Docker engine talks plain HTTP to 127.0.0.0/8 without configuration)."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conductor_core.track.loopback import LOOPBACK, LoopbackServer, free_port, log_tail

BINARIES = ("docker-registry", "registry")
READY_S = 30.0


def registry_binary_or_skip() -> str:
    """The registry's binary, or skip the test naming the package that has it."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no docker-registry binary: apt-get install docker-registry (Debian)")


def start_registry(folder: Path, binary: str) -> LoopbackServer:
    """Start the registry serving ``folder/storage`` on 127.0.0.1; its URL is ``host:port``
    (what an image reference names) and its log (one line per request) ``folder/registry.log``."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'storage'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: {LOOPBACK}:{port}\n",
        encoding="utf-8",
    )
    log = folder / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "serve", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LoopbackServer(url=f"{LOOPBACK}:{port}", process=proc, log=log, ready_s=0.0)
    start = time.monotonic()
    while time.monotonic() - start < READY_S:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited with {proc.returncode}:\n{log_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://{server.url}/v2/", timeout=2) as resp:
                if resp.status == 200:
                    server.ready_s = time.monotonic() - start
                    return server
        except OSError:
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"docker-registry not ready after {READY_S:.0f} s:\n{log_tail(log)}")
