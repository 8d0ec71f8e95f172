"""The evaluation pipeline on KFP's local runner: the uncached task that resolves the Conductor
hands its value to every shard (a ParallelFor given another task's output parameter gets the loop
item instead on the local runner, hence the sub-pipeline), and the report's Markdown artifact has
its plots inline (resolving a real alias: tests/integration/test_components.py)."""

from __future__ import annotations

import json


def test_the_resolved_conductor_reaches_every_shard(tmp_path):
    from conductor_pipeline_runner.local import run_local

    params = {"conductor": "scripted", "limit": 6, "shards": 2, "baselines": "moa"}
    run = run_local("evaluation", params, root=tmp_path / "runs", echo=lambda _: None)
    assert run.ok, f"{run.error}\n{run.log_path.read_text()[-3000:]}"
    resolved = json.loads(run.output("resolve-model", "executor_output.json").read_text())
    assert resolved["parameterValues"] == {"conductor": "scripted", "placement": "cpu"}
    methods = set()
    for records in sorted(run.run_dir.glob("for-loop-*/eval-shard/records")):
        for path in records.glob("records-*.jsonl"):
            methods |= {json.loads(line)["method"] for line in path.read_text().splitlines()}
    assert "conductor" in methods, methods  # the shards evaluated the resolved Conductor
    summary = run.output("aggregate", "summary").read_text()
    assert "](data:image/png;base64," in summary and ".png)" not in summary
