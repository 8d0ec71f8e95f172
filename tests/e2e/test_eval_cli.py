"""`conductor eval run` on the bundled demo slice with the simulated pool: records, the report
(Markdown, HTML, plots) and MLflow entries (metrics, artifacts, traces)."""

from __future__ import annotations

import json

import pytest

from conductor_core.cli import main
from conductor_core.evaluate.records import read_records


@pytest.fixture()
def mlflow_uri(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    return uri


@pytest.mark.slow
def test_eval_run_demo_writes_records_report_and_mlflow(tmp_path, mlflow_uri, capsys) -> None:
    out = tmp_path / "eval"
    main(
        [
            "eval",
            "run",
            "--benchmark",
            "demo",
            "--baselines",
            "single,moa",
            "--repeats",
            "2",
            "--out",
            str(out),
            "--no-progress",
            "--mlflow",
        ]
    )
    printed = capsys.readouterr().out
    records = read_records(out / "records-0of1.jsonl")
    methods = {r.method for r in records}
    assert methods == {
        "conductor:scripted",
        "single:sim-math-expert",
        "single:sim-knowledge-expert",
        "single:sim-code-expert",
        "single:sim-generalist",
        "moa:1",
    }
    n_problems = len({r.problem_id for r in records})
    assert n_problems >= 10 and len(records) == len(methods) * n_problems * 2

    report = (out / "report.md").read_text()
    assert "| method |" in report and "conductor:scripted" in report and "±" in report
    html = (out / "report.html").read_text()
    assert "<table>" in html and "data:image/png;base64," in html
    for png in ("accuracy_vs_cost.png", "accuracy_per_benchmark.png", "worker_usage.png"):
        assert (out / png).stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert {row["method"] for row in summary["rows"]} == methods

    import mlflow

    run_id = printed.strip().splitlines()[-1].split()[-1]
    run = mlflow.get_run(run_id)
    assert run.data.tags["conductor.role"] == "evaluation"
    # one nested run per method, all with the same metric names
    children = mlflow.search_runs(
        experiment_ids=[run.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
        output_format="list",
    )
    assert {c.data.params["method"] for c in children} == methods
    assert len({frozenset(c.data.metrics) for c in children}) == 1
    for child in children:
        assert 0.0 <= child.data.metrics["accuracy"] <= 1.0
        assert 0.0 <= child.data.metrics["accuracy/demo"] <= 1.0
        assert child.data.metrics["cost_per_question"] > 0.0
    assert not any("." in k for c in children for k in c.data.metrics)  # no packed names
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id, "report")}
    assert {"report/report.md", "report/report.html"} <= arts
    traces = mlflow.search_traces(
        locations=[run.info.experiment_id], run_id=run_id, return_type="list"
    )
    assert 0 < len(traces) <= 20
    spans = traces[0].data.spans
    assert any(s.name.startswith("step ") for s in spans)
    assert all("api_key" not in json.dumps(s.to_dict()).lower() for s in spans)


def test_eval_aggregate_merges_shards(tmp_path, capsys) -> None:
    for shard in ("0/2", "1/2"):
        main(
            [
                "eval",
                "run",
                "--benchmark",
                "demo",
                "--no-conductor",
                "--baselines",
                "single:3",
                "--shard",
                shard,
                "--out",
                str(tmp_path / "e"),
                "--no-progress",
            ]
        )
    shards = sorted((tmp_path / "e").glob("records-*of2.jsonl"))
    assert len(shards) == 2
    ids = [{r.problem_id for r in read_records(p)} for p in shards]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    main(["eval", "aggregate", *map(str, shards), "--out", str(tmp_path / "agg")])
    merged = json.loads((tmp_path / "agg" / "summary.json").read_text())
    avg = next(r for r in merged["rows"] if r["benchmark"] == "average")
    assert avg["records"] == len(ids[0]) + len(ids[1])


def test_eval_rejects_bad_shard_and_unknown_baseline(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["eval", "run", "--benchmark", "demo", "--shard", "3/2", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--shard" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["eval", "run", "--benchmark", "demo", "--baselines", "bogus", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "unknown baseline" in capsys.readouterr().err


def test_eval_settings_and_compare_over_mlflow(tmp_path, mlflow_uri, capsys) -> None:
    for setting in ("constrained", "unconstrained"):
        main(
            [
                "eval",
                "run",
                "--benchmark",
                "demo",
                "--limit",
                "6",
                "--setting",
                setting,
                "--out",
                str(tmp_path / setting),
                "--no-progress",
                "--mlflow",
            ]
        )
    capsys.readouterr()
    main(["eval", "compare"])
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("│")]
    # one row per method run: the scripted Conductor of each evaluation
    assert len(rows) == 2 and all("conductor:scripted" in row for row in rows)
    assert "demo-constrained-shard0of1" in table and "demo-unconstrained-shard0of1" in table
    import mlflow

    runs = mlflow.search_runs(
        experiment_names=["conductor-eval"],
        filter_string="tags.`conductor.role` = 'method'",
        output_format="list",
    )
    assert sorted(r.data.params["profile"] for r in runs) == ["constrained", "unconstrained"]
    parents = {mlflow.get_run(r.data.tags["mlflow.parentRunId"]).info.run_name for r in runs}
    assert parents == {"demo-constrained-shard0of1", "demo-unconstrained-shard0of1"}
    with pytest.raises(SystemExit):
        main(["eval", "compare", "--experiment", "nothing-here"])
