"""The conductor Helm chart's files, read without helm: the values schema's worker fields match
the pool schema, the default images are this release's and inside the tested vLLM window, and
every value is documented (the chart rendered by helm: tests/integration/test_conductor_chart.py).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Annotated

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


def load_schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))


def test_schema_types_every_gateway_setting() -> None:
    """Each GatewayConfig field is typed in the chart's schema, and no other: a setting the
    gateway would refuse at startup is refused by `helm install` instead."""
    from conductor_core.serve.config import GatewayConfig

    config = load_schema()["properties"]["gateway"]["properties"]["config"]
    assert config["additionalProperties"] is False
    assert set(config["properties"]) == set(GatewayConfig.model_fields)
    assert "max_concurrent_requests" in config["properties"]
    assert "max_concurrent_requests_per_key" in config["properties"]


def test_gateway_setting_types_agree_with_the_gateway() -> None:
    """The gateway's defaults pass the chart's schema, optional fields accept null, and values
    the gateway refuses at its bounds are refused by the schema too."""
    import jsonschema
    import pydantic

    from conductor_core.serve.config import GatewayConfig

    fields = load_schema()["properties"]["gateway"]["properties"]["config"]["properties"]
    defaults = GatewayConfig().model_dump(mode="json")
    for name, info in GatewayConfig.model_fields.items():
        if name == "api_keys_file":  # set by the chart itself
            continue
        jsonschema.validate(defaults[name], fields[name])
        nullable = info.default is None or type(None) in getattr(info.annotation, "__args__", ())
        types = fields[name].get("type", [])
        assert nullable == ("null" in types), name
        annotation = info.annotation
        if info.metadata:
            annotation = Annotated[annotation, *info.metadata]
        field = pydantic.TypeAdapter(annotation)
        for bad in (0, -1, 10**9, "x"):
            try:
                field.validate_python(bad, strict=True)
            except pydantic.ValidationError:
                accepted_by_gateway = False
            else:
                accepted_by_gateway = True
            accepted_by_chart = jsonschema.Draft7Validator(fields[name]).is_valid(bad)
            if not accepted_by_gateway:
                assert not accepted_by_chart, (name, bad)


def test_schema_pool_settings_match_the_pool_models() -> None:
    from conductor_core.workers.config import (
        CacheConfig,
        FailureRates,
        RetryConfig,
        SimulationProfile,
    )

    pool = load_schema()["properties"]["pool"]["properties"]
    assert set(pool["retry"]["properties"]) == set(RetryConfig.model_fields)
    assert set(pool["cache"]["properties"]) == set(CacheConfig.model_fields)
    simulation = pool["workers"]["items"]["properties"]["simulation"]
    assert set(simulation["properties"]) == set(SimulationProfile.model_fields)
    assert set(simulation["properties"]["failures"]["properties"]) == set(FailureRates.model_fields)


def test_schema_refuses_unknown_keys_at_every_level() -> None:
    """Every object of the schema lists its keys (additionalProperties false) or is a map of
    typed values; arrays type their items. Only the provider-specific request parameters
    (params.extra) and Helm's `global` (a parent chart's, shared by all its subcharts) pass
    through as given."""
    schema = load_schema()
    passthrough = {"extra", "global"}
    loose = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            kinds = node.get("type")
            kinds = kinds if isinstance(kinds, list) else [kinds]
            if "object" in kinds and path.rsplit("/", 1)[-1] not in passthrough:
                extra = node.get("additionalProperties", True)
                if extra is not False and not (isinstance(extra, dict) and extra):
                    loose.append(path)
            if "array" in kinds and "items" not in node:
                loose.append(path)
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(schema, "")
    assert not loose, loose
    # and the defaults pass it
    import jsonschema

    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(values)


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


DIGEST = "sha256:" + "0123456789abcdef" * 4


def image_schemas(node: object, path: str = "") -> list[tuple[str, dict]]:
    """(path, schema) of every image dict of the values schema (an object with a repository)."""
    found = []
    if isinstance(node, dict):
        if "repository" in node.get("properties", {}):
            found.append((path, node))
        for key, value in node.items():
            found += image_schemas(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += image_schemas(value, f"{path}[{i}]")
    return found


def test_every_image_takes_an_optional_digest() -> None:
    """Each image dict (gateway, vLLM, fetcher, a server's override) takes `digest`: "" (by tag,
    the default) or sha256 and 64 lower-case hex digits, nothing else."""
    import jsonschema

    schema = load_schema()
    images = image_schemas(schema)
    paths = {path for path, _ in images}
    assert paths == {
        "/properties/gateway/properties/image",
        "/properties/vllm/properties/image",
        "/properties/vllm/properties/fetcher/properties/image",
        "/properties/conductorModel/properties/image",
        "/properties/pool/properties/workers/items/properties/deploy/properties/image",
    }, paths
    definitions = {"definitions": schema["definitions"]}
    for path, image in images:
        assert image["additionalProperties"] is False, path
        assert "digest" not in image.get("required", []), path
        digest = {**image["properties"]["digest"], **definitions}
        validator = jsonschema.Draft7Validator(digest)
        for good in ("", DIGEST):
            assert validator.is_valid(good), (path, good)
        for bad in (
            "sha256:abc",
            "md5:" + "0" * 32,
            "sha256:" + "A" * 64,
            "sha256:" + "0" * 63,
            "sha256:" + "0" * 65,
            "0" * 64,
            "@" + DIGEST,
            None,
            0,
        ):
            assert not validator.is_valid(bad), (path, bad)
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for image in (
        values["gateway"]["image"],
        values["vllm"]["image"],
        values["vllm"]["fetcher"]["image"],
    ):
        assert image["digest"] == ""
    assert values["conductorModel"]["image"] == {}  # an override: empty = vllm.image as is


def test_images_are_rendered_by_one_template() -> None:
    """No template writes its own `repository:tag`: every image line goes through the
    conductor.image helper (so a digest reaches each of them)."""
    templates = CHART / "templates"
    image_lines = []
    for path in sorted(templates.rglob("*")):
        if path.suffix not in {".yaml", ".tpl"} or path.name == "_helpers.tpl":
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\.(repository|tag)\b", text), path
        image_lines += [
            (path.name, line.strip())
            for line in text.splitlines()
            if re.match(r"\s*(- )?image:", line)
        ]
    assert len(image_lines) == 5, image_lines  # gateway, fetcher, vLLM, path filter, helm test
    for name, line in image_lines:
        assert re.fullmatch(r'image: \{\{ include "conductor\.image" .+ \}\}', line), (name, line)


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
