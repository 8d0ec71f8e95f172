"""The conductor Helm chart's files, read without helm: the values schema's worker fields match
the pool schema, the default images are this release's and inside the tested vLLM window, and
every value is documented (the chart rendered by helm: tests/integration/test_conductor_chart.py).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "conductor"


def test_schema_worker_fields_match_the_pool_schema() -> None:
    from conductor_core.workers.config import WorkerConfig

    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    worker = schema["properties"]["pool"]["properties"]["workers"]["items"]
    assert set(worker["properties"]) == set(WorkerConfig.model_fields) | {"deploy"}
    assert set(worker["properties"]["provider"]["enum"]) == {
        "openai",
        "anthropic",
        "gemini",
        "transformers",
        "simulated",
    }


# ---- images of this release -------------------------------------------------------------------


def test_default_images_are_this_releases(monkeypatch) -> None:
    from conductor_core.cluster import images

    monkeypatch.delenv(images.REGISTRY_ENV, raising=False)
    monkeypatch.delenv(images.TAG_ENV, raising=False)
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for kind, image in (
        ("serve", values["gateway"]["image"]),
        ("base", values["vllm"]["fetcher"]["image"]),
    ):
        assert f"{image['repository']}:{image['tag']}" == images.image(kind)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == images.default_tag()


def test_vllm_image_tag_is_inside_the_tested_vllm_window() -> None:
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requirement = Requirement(project["project"]["optional-dependencies"]["vllm"][0])
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    tag = values["vllm"]["image"]["tag"]
    assert values["vllm"]["image"]["repository"] == "vllm/vllm-openai"
    assert requirement.specifier.contains(tag.removeprefix("v")), (tag, requirement)


def test_every_value_is_documented() -> None:
    """Each key of values.yaml has a comment on the line(s) above it or its parent's."""
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    key = re.compile(r"^(\s*)([A-Za-z][\w.-]*):")
    undocumented = []
    for i, line in enumerate(lines):
        m = key.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        documented = False
        for prev in reversed(lines[:i]):
            stripped = prev.strip()
            if stripped.startswith("#"):
                documented = True  # its own comment (or that of the group it ends)
                break
            depth = len(prev) - len(prev.lstrip())
            if stripped.startswith("- ") or depth > indent or (depth == indent and indent > 0):
                continue  # list items, deeper lines, undocumented siblings of a nested group
            # a parent (documented in its turn): it covers its children; else nothing does
            documented = depth < indent
            break
        if not documented:
            undocumented.append(line.strip())
    assert not undocumented, undocumented
