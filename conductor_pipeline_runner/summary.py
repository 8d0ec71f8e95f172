"""The summary a local pipeline run ends with: the trained Conductor against the baselines, the
time per task, and where the runs, reports and model are."""

import json
import os
from pathlib import Path

from conductor_pipeline_runner.local import LocalRun, local_tracking_uri, read_comparison


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _registered(run: LocalRun) -> dict | None:
    path = run.output("register", "registered")
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _tracking_prefix(run: LocalRun, root: Path) -> str:
    """What a later command needs to find this run's MLflow store (nothing for ./runs, which
    is where every ``conductor`` command looks by default)."""
    if run.tracking_uri and run.tracking_uri != os.environ.get("MLFLOW_TRACKING_URI"):
        return f"MLFLOW_TRACKING_URI={run.tracking_uri} "
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return ""
    from conductor_core.track.mlflow_run import runs_dir

    if root.resolve() == runs_dir():
        return ""
    return f"MLFLOW_TRACKING_URI=sqlite:///{root / 'mlflow.db'} "


def render_summary(run: LocalRun, *, root: Path, pool: str = "bundled") -> str:
    """The run's summary as plain text (tables and paths); ``pool`` is the run's pool parameter
    (the trained model is asked on the pool it learned)."""
    from conductor_core.pipeline_steps.context import pool_path

    parts = [f"\npipeline {run.pipeline}: {'ok' if run.ok else 'FAILED'} in {run.seconds:.0f} s"]
    comparison = read_comparison(run)
    if comparison:
        rows = [
            [
                r["label"],
                f"{100 * r['accuracy']:.1f}% ± {100 * r['stderr']:.1f}",
                f"{r['calls_per_question']:.2f}",
                f"{r['cost_per_question']:.5f}",
            ]
            for r in comparison["rows"]
        ]
        parts += [
            "",
            _table(["held-out", "accuracy", "calls/question", "cost/question ($)"], rows),
        ]
        ahead = comparison.get("conductor_ahead")
        if ahead is not None:
            parts.append(
                "the trained Conductor is "
                + ("AHEAD of" if ahead else "NOT ahead of")
                + " the best single worker"
            )
    if run.tasks:
        rows = [[t.name, t.status.lower(), f"{t.seconds:.0f}"] for t in run.tasks]
        parts += ["", _table(["task", "status", "seconds"], rows)]
    where = [["log", str(run.log_path)]]
    if run.run_dir is not None:
        where.append(["task outputs", str(run.run_dir)])
    for task, label in (("validate", "data report (HTML)"), ("aggregate", "report (HTML)")):
        report = run.output(task, "report")
        if report is not None:
            where.append([label, str(report)])
    registered = _registered(run)
    if registered:
        name = registered.get("registered_model")
        weights = str(registered.get("weights_uri"))
        if not run.kept_artifacts:
            weights += " (in the run's loopback S3 server, stopped with it)"
        where.append(["model weights", weights])
        if name and run.kept_artifacts:
            model = f"models:/{name}/{registered.get('model_version')}"
            where.append(["registered", model])
            ask = (
                f"{_tracking_prefix(run, root)}conductor solve --pool {pool_path(pool)} "
                f'--conductor "{model}" "QUESTION"'
            )
            where.append(["ask it", ask])
    if run.kfp_run_id:
        where.append(["MLflow run", f"{run.mlflow_run_name} (KFP run id {run.kfp_run_id})"])
        if comparison:
            compare = (
                f"{_tracking_prefix(run, root)}conductor eval compare --kfp-run-id {run.kfp_run_id}"
            )
            where.append(["compare methods", compare])
    store = run.tracking_uri or local_tracking_uri(root)
    where.append(["MLflow", f"mlflow ui --backend-store-uri {store}"])
    parts += ["", _table(["what", "where"], where)]
    return "\n".join(parts) + "\n"
