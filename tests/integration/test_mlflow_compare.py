"""MLflow laid out for comparing experiments, on a real (SQLite) MLflow store:

- a pipeline run is one parent run found again by its KFP run id, with one nested run per stage
  (a retried stage re-opens its run);
- an evaluation logs one nested run per method with the same metric names in each, under the
  pipeline's stage run (or under a new evaluation run);
- ``conductor eval compare`` and ``mlflow.search_runs`` read the method runs back side by side;
- a training stage's tracker logs into its stage run of the pipeline run.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conductor_core.cli import cli
from conductor_core.evaluate import EvalConfig, run_shard
from conductor_core.evaluate.aggregate import OVERALL, aggregate
from conductor_core.evaluate.mlflow_logging import compare_runs, log_evaluation, method_metrics
from conductor_core.evaluate.records import read_records
from conductor_core.track import pipeline_runs
from conductor_core.track.mlflow_run import log_metrics, tracking_at
from conductor_core.track.pipeline_runs import (
    TAG_KFP_RUN_ID,
    TAG_PIPELINE_RUN,
    TAG_ROLE,
    TAG_STAGE,
    close_pipeline_run,
    git_commit,
    pipeline_run,
    stage_run,
)
from tests.support.eval_records import eval_record

pytestmark = pytest.mark.slow

METHODS = ["conductor:scripted", "single:sim-math-expert", "single:sim-knowledge-expert"]
SAME_NAMES = {
    "accuracy/demo",
    "accuracy_stderr/demo",
    "accuracy",
    "accuracy_stderr",
    "cost_per_question",
    "calls_per_question",
    "tokens_per_question",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One SQLite store (a real MLflow backend) for the module; creating one costs seconds."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture()
def env(store, monkeypatch):
    """This test's MLflow: the module's store, no injected run, no run active around it."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setenv(pipeline_runs.GIT_COMMIT_ENV, "0123abcd")
    with tracking_at(store):
        while mlflow.active_run() is not None:
            mlflow.end_run()
        yield store
        while mlflow.active_run() is not None:
            mlflow.end_run()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """One evaluated shard (no MLflow): the scripted Conductor and two single-worker baselines
    on six demo problems with the bundled simulated pool. Calling ``run_shard`` again on its
    config does no new work (the records are the checkpoint) and only logs."""
    out = tmp_path_factory.mktemp("eval") / "eval"
    config = EvalConfig(
        benchmark="demo", limit=6, baselines=["single:0", "single:1"], output_dir=str(out)
    )
    return run_shard(config, progress=False)


def _client():
    import mlflow

    return mlflow.MlflowClient()


def _children(parent_id: str) -> list:
    run = _client().get_run(parent_id)
    return _client().search_runs(
        [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )


def test_pipeline_run_and_stage_runs_are_found_again(env):
    parent = pipeline_run("conductor-train", "kfp-1", experiment="pipe", tags={"team": "ml"})
    with stage_run(parent, "curate", params={"mixture": {"math": 0.5}}) as run:
        log_metrics({"problems": 120})
        curate_id = run.info.run_id
    with pytest.raises(RuntimeError), stage_run(parent, "base") as run:
        base_id = run.info.run_id
        raise RuntimeError("pod evicted")
    assert _client().get_run(base_id).info.status == "FAILED"

    # a retried task (a separate process: only the KFP run id is shared) finds the same runs
    again = pipeline_run("conductor-train", "kfp-1", experiment="pipe")
    assert again == parent
    with stage_run(again, "base", params={"steps": 4}) as run:
        assert run.info.run_id == base_id
        log_metrics({"reward": 0.75}, step=4)
    with stage_run(again, "curate", params={"mixture": {"math": 0.5}}) as run:
        assert run.info.run_id == curate_id

    children = _children(parent)
    assert sorted(r.data.tags[TAG_STAGE] for r in children) == ["base", "curate"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.tags[TAG_KFP_RUN_ID] == "kfp-1"
        assert child.data.tags[TAG_PIPELINE_RUN] == parent
        assert child.data.tags["conductor.git_commit"] == "0123abcd"
    base = _client().get_run(base_id)
    assert base.data.metrics["reward"] == 0.75 and base.data.params["steps"] == "4"
    assert _client().get_run(curate_id).data.params["mixture.math"] == "0.5"

    tags = _client().get_run(parent).data.tags
    assert tags["conductor.pipeline"] == "conductor-train"
    assert tags[TAG_KFP_RUN_ID] == "kfp-1" and tags[TAG_ROLE] == "pipeline"
    assert tags["mlflow.source.git.commit"] == "0123abcd" and tags["team"] == "ml"
    assert pipeline_run("conductor-train", "kfp-2", experiment="pipe") != parent
    assert _client().get_run(parent).info.status == "RUNNING"
    assert close_pipeline_run("kfp-1", "FINISHED", experiment="pipe") == (parent, 0)
    assert _client().get_run(parent).info.status == "FINISHED"


def test_concurrently_created_parents_collapse_to_the_older(env, monkeypatch):
    first = pipeline_run("p", "kfp-race", experiment="pipe")
    # another task creates its run before it could see ours: its first search comes back empty
    real_find = pipeline_runs._find
    calls = []

    def late_find(client, experiment_ids, tags):
        calls.append(tags)
        return [] if len(calls) == 1 else real_find(client, experiment_ids, tags)

    monkeypatch.setattr(pipeline_runs, "_find", late_find)
    second = pipeline_run("p", "kfp-race", experiment="pipe")
    assert second == first and len(calls) == 2
    exp = _client().get_run(first).info.experiment_id
    live = _client().search_runs([exp], filter_string="tags.`conductor.kfp_run_id` = 'kfp-race'")
    assert [r.info.run_id for r in live] == [first]


def test_git_commit_from_env_else_git_else_absent(tmp_path, monkeypatch):
    monkeypatch.setenv(pipeline_runs.GIT_COMMIT_ENV, "feedbeef")
    assert git_commit() == "feedbeef"
    monkeypatch.delenv(pipeline_runs.GIT_COMMIT_ENV)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_commit(str(tmp_path)) is None


def test_a_quote_in_a_run_id_is_refused(env):
    from conductor_core.errors import ConfigError

    with pytest.raises(ConfigError, match="kfp_run_id"):
        pipeline_run("p", "x' or '1'='1", experiment="pipe")


def test_evaluation_logs_one_run_per_method_under_the_pipeline(env, shard):
    import mlflow

    parent = pipeline_run("conductor-eval", "kfp-eval", experiment="pipe")
    result = run_shard(shard.config, progress=False, parent_run_id=parent)
    assert result.new_records == 0  # the shard was complete: only logged
    assert set(result.method_run_ids) == set(METHODS)

    evaluation = _client().get_run(result.run_id)
    assert evaluation.data.tags["mlflow.parentRunId"] == parent
    assert evaluation.data.tags[TAG_STAGE] == "aggregate"
    arts = {a.path for a in _client().list_artifacts(result.run_id)}
    assert {"per_problem.json", "report"} <= arts
    assert {a.path for a in _client().list_artifacts(result.run_id, "report")} >= {
        "report/report.md",
        "report/report.html",
    }

    runs = {r.data.tags["conductor.method"]: r for r in _children(result.run_id)}
    assert set(runs) == set(METHODS)
    names = {frozenset(r.data.metrics) for r in runs.values()}
    assert len(names) == 1, "every method run has the same metric names"
    assert set(next(iter(names))) >= SAME_NAMES
    for method, run in runs.items():
        overall = shard.summary.get(method, OVERALL)
        assert run.data.metrics["accuracy"] == pytest.approx(overall.accuracy)
        assert run.data.metrics["accuracy/demo"] == pytest.approx(
            shard.summary.get(method, "demo").accuracy
        )
        assert run.data.metrics["cost_per_question"] == pytest.approx(overall.cost_per_question)
        params = run.data.params
        assert params["method"] == method and params["benchmarks"] == "demo"
        assert params["profile"] == "default" and "sim-math-expert" in params["pool"]
        assert params["kind"] == ("conductor" if method.startswith("conductor:") else "baseline")
        assert run.data.tags[TAG_KFP_RUN_ID] == "kfp-eval"
    assert runs["conductor:scripted"].data.params["source"] == "scripted"
    accuracies = {m: r.data.metrics["accuracy"] for m, r in runs.items()}
    assert len(set(accuracies.values())) > 1, "the methods differ on the demo slice"

    # a retried evaluation task logs into the same runs
    again = run_shard(shard.config, progress=False, parent_run_id=parent)
    assert again.run_id == result.run_id and again.method_run_ids == result.method_run_ids
    assert len(_children(result.run_id)) == len(METHODS)

    # read back for MLflow's compare view: one row per method, benchmark columns side by side
    frame = mlflow.search_runs(
        experiment_ids=[evaluation.info.experiment_id],
        filter_string="tags.`conductor.role` = 'method' and tags.`conductor.kfp_run_id` = "
        "'kfp-eval'",
    )
    assert sorted(frame["params.method"]) == sorted(METHODS)
    assert {"metrics.accuracy/demo", "metrics.accuracy", "metrics.cost_per_question"} <= set(
        frame.columns
    )
    assert frame["metrics.accuracy/demo"].notna().all()
    by_method = dict(zip(frame["params.method"], frame["metrics.accuracy/demo"], strict=True))
    assert by_method == pytest.approx(accuracies)


def test_eval_compare_prints_the_method_runs(env, shard):
    parent = pipeline_run("conductor-eval", "kfp-cli", experiment="pipe")
    logged = run_shard(shard.config, progress=False, parent_run_id=parent)
    runner = CliRunner()
    table = runner.invoke(
        cli, ["eval", "compare", "--kfp-run-id", "kfp-cli", "--tracking-uri", env]
    )
    assert table.exit_code == 0, table.output
    for method in METHODS:
        assert method in table.output
    assert "demo" in table.output and "$/q" in table.output and "calls/q" in table.output
    rows = [line for line in table.output.splitlines() if line.startswith("│")]
    assert len(rows) == len(METHODS)

    for args in (["--parent-run", parent], ["--parent-run", logged.run_id]):
        out = runner.invoke(cli, ["eval", "compare", *args, "--json"])
        assert out.exit_code == 0, out.output
        got = {row["method"]: row for row in json.loads(out.output)}
        assert set(got) == set(METHODS)
        for method, row in got.items():
            expected = shard.summary.get(method, "demo").accuracy
            assert row["accuracy_per_benchmark"] == {"demo": pytest.approx(expected)}
            assert row["run_id"] == logged.method_run_ids[method]
            assert row["calls_per_question"] == pytest.approx(
                shard.summary.get(method, OVERALL).calls_per_question
            )

    missing = runner.invoke(cli, ["eval", "compare", "--kfp-run-id", "no-such-run"])
    assert missing.exit_code == 1 and "no method runs found" in missing.output
    both = runner.invoke(cli, ["eval", "compare", "--kfp-run-id", "a", "--parent-run", "b"])
    assert both.exit_code == 2


def test_an_evaluation_outside_a_pipeline_gets_its_own_parent(env, shard):
    records = read_records(shard.records_path)
    first = log_evaluation(
        shard.summary, records, shard.report, run_name="eval-a", experiment="standalone"
    )
    second = log_evaluation(
        shard.summary, records, shard.report, run_name="eval-b", experiment="standalone"
    )
    assert first.run_id != second.run_id
    top = _client().get_run(first.run_id)
    assert "mlflow.parentRunId" not in top.data.tags and top.data.tags[TAG_ROLE] == "evaluation"
    assert set(first.method_runs.values()).isdisjoint(second.method_runs.values())
    rows = compare_runs("standalone")
    assert len(rows) == 2 * len(METHODS)
    assert [r.evaluation for r in rows] == ["eval-a"] * 3 + ["eval-b"] * 3
    assert [r.method for r in rows[:3]] == shard.summary.methods  # in the order evaluated
    only_a = compare_runs(parent_run_id=first.run_id)
    assert {r.run_id for r in only_a} == set(first.method_runs.values())
    assert all(r.metrics == method_metrics(shard.summary, r.method) for r in only_a)


def test_training_stage_logs_into_its_pipeline_stage_run(env, tmp_path, monkeypatch):
    from conductor_core.train.config import build_config
    from conductor_core.train.stage_tracker import MlflowTracker, make_tracker, read_run_file

    parent = pipeline_run("conductor-train", "kfp-train", experiment="pipe")
    config = build_config(
        {"output_dir": str(tmp_path / "base"), "tracking": {"parent_run_id": parent}}
    )
    tracker = make_tracker(config, resume=False)
    assert isinstance(tracker, MlflowTracker) and tracker.parent_run_id == parent
    assert tracker.stage == "base"
    tracker.start()
    tracker.log_metrics({"reward": 0.5}, step=1)
    tracker.finish("FAILED")
    run = _client().get_run(tracker.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent and run.data.tags[TAG_STAGE] == "base"
    assert run.info.status == "FAILED" and not tracker.resumed
    assert read_run_file(tmp_path / "base" / "mlflow_run.json", env) == tracker.run_id

    retried = make_tracker(config, resume=False)  # a new pod: no local state needed
    retried.start()
    retried.log_metrics({"reward": 0.75}, step=2)
    retried.finish()
    assert retried.run_id == tracker.run_id and retried.resumed
    history = _client().get_metric_history(tracker.run_id, "reward")
    assert sorted(m.step for m in history) == [1, 2]
    assert _client().get_run(tracker.run_id).info.status == "FINISHED"

    # an injected MLFLOW_RUN_ID (KFP's own MLflow integration) still wins
    exp = _client().get_run(parent).info.experiment_id
    injected = _client().create_run(exp).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", injected)
    third = make_tracker(config, resume=False)
    third.start()
    third.finish()
    assert third.run_id == injected
    assert [r.data.tags[TAG_STAGE] for r in _children(parent)] == ["base"]


def test_a_local_pipeline_runs_evaluation_is_found_as_its_summary_says(env, tmp_path):
    """What `conductor pipeline run training --local` leaves in MLflow, made with the pipeline's
    own steps (its parent run, tagged with the KFP run id the local run gave its tasks, and the
    aggregate step's evaluation under it): the summary names the run and prints the compare
    command, and that command, the names the summary shows and plain `compare` all find the
    method runs; the evaluation logged counts a re-run record once."""
    import shlex

    from conductor_core.evaluate.records import RecordWriter
    from conductor_core.pipeline_steps.eval_steps import aggregate_step
    from conductor_core.track.pipeline_runs import PIPELINE_EXPERIMENT
    from conductor_pipeline_runner.local import LocalRun, _mlflow_run, local_tracking_uri
    from conductor_pipeline_runner.summary import render_summary

    shard = tmp_path / "shard"
    with RecordWriter(shard / "records-0of1.jsonl") as w:
        w.write(eval_record("p1", "conductor", infra_error=True))
        w.write(eval_record("p2", "conductor", correct=False))
        w.write(eval_record("p1", "conductor"))  # the re-run of the infrastructure failure
        w.write(eval_record("p1", "single:a", correct=False))
        w.write(eval_record("p2", "single:a"))
    run_dir = tmp_path / "kfp" / "conductor-training-2030-01-02-03-04-05-000006"
    aggregate_step(
        [shard],
        run_dir / "aggregate" / "comparison",
        run_id="31415926",
        pipeline="conductor-training",
        tracking_uri=env,
        log=lambda _: None,
    )
    found = _mlflow_run("31415926", local_tracking_uri(tmp_path), run_dir)
    assert found is not None and found.kfp_run_id == "31415926"
    assert found.run_name == "conductor-training-31415926"
    parent = _client().get_run(found.run_id)
    assert _client().get_experiment(parent.info.experiment_id).name == PIPELINE_EXPERIMENT

    run = LocalRun(
        pipeline="training",
        run_dir=run_dir,
        log_path=tmp_path / "run.log",
        seconds=1.0,
        kfp_run_id=found.kfp_run_id,
        mlflow_run_name=found.run_name,
    )
    summary = render_summary(run, root=tmp_path)
    assert "conductor-training-31415926 (KFP run id 31415926)" in summary
    (command,) = [line for line in summary.splitlines() if "conductor eval compare" in line]
    args = shlex.split(command[command.index("conductor eval compare") :])[1:]
    runner = CliRunner()

    def methods(*argv: str) -> dict[str, dict]:
        out = runner.invoke(cli, [*argv, "--json"])
        assert out.exit_code == 0, out.output
        return {row["method"]: row for row in json.loads(out.output)}

    rows = methods(*args)
    assert set(rows) == {"conductor", "single:a"}
    assert rows["conductor"]["accuracy"] == pytest.approx(0.5)
    for name in (found.run_name, run_dir.name, str(run_dir)):
        assert methods("eval", "compare", "--kfp-run-id", name) == rows
    table = runner.invoke(cli, ["eval", "compare", "--kfp-run-id", run_dir.name])
    assert "conductor-training-31415926/evaluate" in table.output

    # plain `compare` reads the pipelines' experiment beside the standalone evaluations'
    records = [eval_record("p1", "single:b")]
    standalone = log_evaluation(aggregate(records), records, {}, run_name="on its own")
    latest = methods("eval", "compare")
    assert {"conductor", "single:a", "single:b"} <= set(latest)
    assert latest["single:b"]["run_id"] == standalone.method_runs["single:b"]

    # the evaluation run's per-problem table holds the re-run, not the failure before it
    evaluation = rows["conductor"]["parent_run_id"]
    path = _client().download_artifacts(evaluation, "per_problem.json", str(tmp_path))
    with open(path, encoding="utf-8") as fh:
        logged = json.load(fh)  # MLflow's table format: {"columns": [...], "data": [rows]}
    table = [dict(zip(logged["columns"], row, strict=True)) for row in logged["data"]]
    pairs = sorted((r["method"], r["problem_id"], r["infra_error"]) for r in table)
    assert [(m, p) for m, p, _ in pairs] == [
        ("conductor", "p1"),
        ("conductor", "p2"),
        ("single:a", "p1"),
        ("single:a", "p2"),
    ]
    assert not any(infra for _, _, infra in pairs)
