"""The charts as others find and depend on them, read without helm: each README's values table is
what scripts/chart_readme.py makes of values.yaml and the schema (so it is up to date and lists
every value), Chart.yaml's metadata and Artifact Hub annotations agree with the project, and the
Grafana dashboard the chart installs draws the series the gateway exports, each of them. (The
charts rendered by helm, as a subchart and from an OCI registry:
tests/integration/test_chart_distribution.py; the monitoring objects rendered:
tests/integration/test_chart_monitoring.py.)
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHARTS = {name: ROOT / "charts" / name for name in ("conductor", "conductor-training-rbac")}
DASHBOARD = CHARTS["conductor"] / "dashboards" / "conductor-gateway.json"

# The vLLM series the dashboard draws (vLLM's v1 engine metrics, the same names in the chart's
# vllm.image tag and in the `vllm` extra's window).
VLLM_SERIES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:kv_cache_usage_perc",
    "vllm:generation_tokens_total",
}


def chart_readme():
    spec = importlib.util.spec_from_file_location("chart_readme", ROOT / "scripts/chart_readme.py")
    assert spec and spec.loader
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# ---- the README of the values -----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_readme_is_up_to_date(name) -> None:
    """The README's values table is what the script makes now: a value added, changed or
    described anew in values.yaml without `scripts/chart_readme.py` fails here."""
    readme = chart_readme()
    chart = CHARTS[name]
    current = (chart / "README.md").read_text(encoding="utf-8")
    assert current == readme.readme(chart), (
        f"charts/{name}/README.md is out of date: run .venv/bin/python scripts/chart_readme.py"
    )
    assert current.count(readme.BEGIN) == 1 and current.count(readme.END) == 1


def leaf_paths(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        return [p for key, value in node.items() for p in leaf_paths(value, (*path, key))]
    return [path]


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_readme_documents_every_value(name) -> None:
    """Every value of values.yaml is a row, or inside a row (a Kubernetes object's default), and
    every row has a type, a description and (unless it is a group) a default."""
    readme = chart_readme()
    chart = CHARTS[name]
    values_text = (chart / "values.yaml").read_text(encoding="utf-8")
    schema = json.loads((chart / "values.schema.json").read_text(encoding="utf-8"))
    rows = readme.rows(values_text, schema)
    keys = {tuple(row.key.split(".")) for row in rows}
    for path in leaf_paths(yaml.safe_load(values_text)):
        assert any(path[:n] in keys for n in range(1, len(path) + 1)), path
    for row in rows:
        assert row.type and row.description, row
    groups = [row for row in rows if not row.default]
    for group in groups:  # a group's keys follow it
        assert any(other.key.startswith(group.key + ".") for other in rows), group
    table = (chart / "README.md").read_text(encoding="utf-8")
    for row in rows:
        assert f"| `{row.key}` |" in table


def test_readme_rows_follow_the_comments_and_the_schema() -> None:
    readme = chart_readme()
    values_text = """\
# Top.
top: 1

# ---- Section ----
# A group: its children have comments.
group:
  # Child one, | with a pipe, <angle> and *star*.
  one: "a"
  # Child two.
  two: [1, 2]
#  - example: not a description
  # An object whose keys have no comments: one row.
  object:
    a: 1
    b: {c: 2}
  # A list of objects: their keys are not values.
  items:
    - name: x
      port: 1
bare: true
"""
    schema = {
        "type": "object",
        "properties": {
            "bare": {"type": "boolean", "description": "From the schema."},
            "group": {
                "type": "object",
                "properties": {"one": {"enum": ["a", "b"]}, "two": {"$ref": "#/definitions/n"}},
            },
        },
        "definitions": {"n": {"type": ["array", "null"]}},
    }
    rows = {row.key: row for row in readme.rows(values_text, schema)}
    assert list(rows) == ["top", "group", "group.one", "group.two", "group.object",
                          "group.items", "bare"]  # fmt: skip
    assert rows["top"].section == "" and rows["group"].section == "Section"
    assert rows["group"].default == "" and rows["group"].description.startswith("A group")
    assert rows["group.one"].type == 'one of "a", "b"'
    assert rows["group.two"].type == "array or null"
    assert rows["group.object"].default == '`{"a": 1, "b": {"c": 2}}`'
    assert rows["group.items"].type == "array"
    assert rows["bare"].description == "From the schema."  # no comment: the schema's words
    assert readme._markdown(rows["group.one"].description) == (
        "Child one, \\| with a pipe, &lt;angle&gt; and \\*star\\*."
    )
    assert readme._markdown("keep `<x> | *y*` as code") == "keep `<x> \\| *y*` as code"
    with pytest.raises(ValueError, match="values without a description: undescribed"):
        readme.rows("# Top.\ntop: 1\nundescribed: 2\n", {})


# ---- Chart.yaml -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_chart_metadata(name) -> None:
    chart = load_yaml(CHARTS[name] / "Chart.yaml")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert chart["home"].startswith("https://")
    assert chart["sources"] and all(url.startswith("https://") for url in chart["sources"])
    assert chart["maintainers"] and all(m["name"] for m in chart["maintainers"])
    assert len(chart["keywords"]) >= 3
    notes = chart["annotations"]
    assert notes["artifacthub.io/license"] == project["project"]["license"]
    links = yaml.safe_load(notes["artifacthub.io/links"])
    assert links and all(link["name"] and link["url"].startswith("https://") for link in links)
    for link in links:  # links into this repository name files that exist
        match = re.search(r"/blob/main/(.+)$", link["url"])
        if match:
            assert (ROOT / match.group(1)).is_file(), link


def test_artifact_hub_images_are_the_default_images() -> None:
    """The images Artifact Hub lists (and scans) are the ones the chart runs by default."""
    chart = load_yaml(CHARTS["conductor"] / "Chart.yaml")
    values = load_yaml(CHARTS["conductor"] / "values.yaml")
    listed = {i["image"] for i in yaml.safe_load(chart["annotations"]["artifacthub.io/images"])}
    defaults = {
        f"{image['repository']}:{image['tag']}"
        for image in (
            values["gateway"]["image"],
            values["vllm"]["fetcher"]["image"],
            values["vllm"]["image"],
        )
    }
    assert listed == defaults


# ---- the Grafana dashboard --------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found += panel.get("panels", [])
    return found


def expressions(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p.get("targets", [])]


def gateway_series() -> set[str]:
    """Every series name the gateway's /metrics can show (counters' _total, histograms' _bucket,
    _sum and _count, gauges as they are)."""
    pytest.importorskip("prometheus_client")
    from conductor_core.serve.metrics import GatewayMetrics

    names = set()
    for family in GatewayMetrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


SERIES = re.compile(r"(?<![$\w])((?:conductor_|vllm:)[a-z0-9_:]*[a-z])\b")


def test_dashboard_draws_the_series_the_gateway_exports() -> None:
    """Each series the dashboard asks for exists (a renamed metric would leave an empty panel),
    and each metric the gateway exports is drawn somewhere."""
    exported = gateway_series()
    asked = {name for expr in expressions(dashboard()) for name in SERIES.findall(expr)}
    unknown = asked - exported - VLLM_SERIES
    assert not unknown, unknown
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exported}
    drawn = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in asked}
    assert families <= drawn, families - drawn
    assert asked >= VLLM_SERIES
    for name in (
        "conductor_gateway_worker_latency_seconds_bucket",
        "conductor_gateway_time_to_first_token_seconds_bucket",
        "conductor_gateway_build_info",
    ):
        assert name in asked, name


def test_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "conductor-gateway" and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job", "vllm_job"):
        query = variables[name]["query"]["query"]
        assert query.startswith("label_values("), query
    all_panels = panels(board)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel.get("description"), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
    used = set()
    for expr in expressions(board):
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        used |= set(re.findall(r"\$(\w+)", expr))
        gateway = "conductor_gateway" in expr
        # every series of one release: its namespace and gateway job (or vLLM job) selected
        assert 'namespace="$namespace"' in expr, expr
        assert ('job=~"$job"' if gateway else 'job=~"$vllm_job"') in expr, expr
    assert used - {"__rate_interval", "__range"} == {"namespace", "job", "vllm_job"}
