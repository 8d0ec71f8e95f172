"""``conductor pipeline``: compile, run locally, submit or schedule the Kubeflow pipelines.

It joins the ``conductor`` command through the ``conductor.commands`` entry point, so the library
(``conductor_core``) never imports this package or the pipelines, and installs without KFP.
"""

import json
import sys
from pathlib import Path
from typing import Any

import click

from conductor_core.cli.options import OUT_DIR, RenamedOptionsCommand
from conductor_core.errors import ConfigError
from conductor_pipelines.registry import COMPILED_DIR, NAMES


def _parse_sets(values: tuple[str, ...]) -> dict[str, Any]:
    """Pipeline parameters from ``--set key=value`` (parsed as ``conductor train --set`` does;
    an empty value is the empty string, as the pipelines' string parameters expect)."""
    from conductor_core.configfiles import parse_sets

    return {k: "" if v is None else v for k, v in parse_sets(values).items()}


@click.group(name="pipeline")
def command() -> None:
    """Kubeflow pipelines: compile them, run them locally, submit them to a cluster."""


def _token(token_env: str | None) -> str | None:
    """The bearer token in the variable ``--token-env`` names (None without the option)."""
    if not token_env:
        return None
    import os

    token = os.environ.get(token_env)
    if not token:
        raise ConfigError(f"--token-env: ${token_env} is not set")
    return token


@command.command("compile", cls=RenamedOptionsCommand, renamed=[OUT_DIR])
@click.argument("names", nargs=-1, type=click.Choice(NAMES))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=str(COMPILED_DIR),
    show_default=True,
    help="Folder of the compiled YAML files.",
)
@click.option(
    "--settings",
    "settings_path",
    default=None,
    help="Cluster settings YAML merged over the bundled ones (GPU type and count, tolerations, "
    "node selector, Secrets); default: $CONDUCTOR_CLUSTER_SETTINGS.",
)
@click.option(
    "--eval-parallelism",
    type=int,
    default=None,
    help="Evaluation shards run at once (KFP fixes it at compile time; default 4).",
)
@click.option(
    "--images",
    "push_record",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Push record of `make images REGISTRY=...` (.images/pushed.json): its images are named "
    "by digest (pull policy IfNotPresent), the others by its registry and tag (Always).",
)
@click.option(
    "--image-registry",
    envvar="CONDUCTOR_IMAGE_REGISTRY",
    default=None,
    help="Registry the images are pulled from (host[:port][/path]); with it, --image-tag or "
    "--images every task gets an explicit pull policy. [env: CONDUCTOR_IMAGE_REGISTRY]",
)
@click.option(
    "--image-tag",
    envvar="CONDUCTOR_IMAGE_TAG",
    default=None,
    help="Tag of the images (e.g. the commit `make images REGISTRY=...` pushed; pull policy "
    "Always). [env: CONDUCTOR_IMAGE_TAG]",
)
def compile_cmd(
    names, out_dir, settings_path, eval_parallelism, push_record, image_registry, image_tag
) -> None:
    """Compile pipelines (all by default) to YAML for the Kubeflow UI or `submit`."""
    from conductor_core.cluster.images import pins as image_pins
    from conductor_core.cluster.settings import load_cluster_settings
    from conductor_pipelines.registry import compile_pipeline

    settings = load_cluster_settings(settings_path)
    pins = None
    if push_record or image_registry or image_tag:
        try:
            pins = image_pins(image_registry, image_tag, push_record)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
        for line in pins.describe():
            click.echo(f"image {line}")
    for name in names or NAMES:
        path = compile_pipeline(
            name,
            Path(out_dir) / f"{name}.yaml",
            settings=settings,
            eval_parallelism=eval_parallelism,
            pins=pins,
        )
        click.echo(f"compiled {name}: {path}")


@command.command("sandbox-policy")
@click.option(
    "--settings",
    "settings_path",
    default=None,
    help="Cluster settings YAML the pipelines were compiled with; default: "
    "$CONDUCTOR_CLUSTER_SETTINGS, else the bundled ones.",
)
@click.option(
    "--pod-kind",
    type=click.Choice(["gpu", "cpu", "cpu_train", "gpu_eval"]),
    default="gpu",
    show_default=True,
    help="Whose sandbox settings the policy applies (the pods that grade generated code).",
)
@click.option("--namespace", default=None, help="The pipeline's namespace [the settings'].")
@click.option(
    "--service-account",
    default=None,
    help="Only pods run by this account [the settings' service_account].",
)
def sandbox_policy_cmd(settings_path, pod_kind, namespace, service_account) -> None:
    """Print the Kyverno ClusterPolicy that gives the graders' pods the fields the code
    sandbox needs (docs/sandbox.md), for `kubectl apply -f -`."""
    import yaml

    from conductor_core.cluster.sandbox_policy import admission_policy
    from conductor_core.cluster.settings import load_cluster_settings

    settings = load_cluster_settings(settings_path)
    ns = namespace or settings.namespace
    if not ns:
        raise click.UsageError("give --namespace (the settings name none)")
    sandbox = getattr(settings, pod_kind).sandbox
    account = service_account or settings.service_account
    try:
        policy = admission_policy(sandbox, ns, service_account=account)
    except ConfigError as exc:
        raise click.ClickException(f"{exc} (pod kind {pod_kind})") from exc
    click.echo(yaml.safe_dump(policy, sort_keys=False), nl=False)


@command.command("close-stale")
@click.option("--host", required=True, help="The KFP API endpoint (as for submit).")
@click.option("--token-env", default=None, metavar="NAME", help="Variable holding a bearer token.")
@click.option("--namespace", default=None, help="The Kubeflow profile namespace (multi-user).")
def close_stale_cmd(host, token_env, namespace) -> None:
    """Close the MLflow runs ($MLFLOW_TRACKING_URI) of pipeline runs that ended without their
    exit handler (terminated from the UI), asking Kubeflow Pipelines how each ended."""
    from conductor_pipeline_runner.submit import SubmitError, close_stale_runs

    token = _token(token_env)
    try:
        closed = close_stale_runs(
            host=host, existing_token=token, namespace=namespace, log=click.echo
        )
    except SubmitError as exc:
        raise click.ClickException(str(exc)) from exc
    for kfp_run_id, status in closed:
        click.echo(f"{kfp_run_id}: closed {status}")
    click.echo(f"{len(closed)} MLflow run(s) closed")


@command.command("run")
@click.argument("name", type=click.Choice(NAMES))
@click.option(
    "--local",
    "local",
    is_flag=True,
    help="Run on Kubeflow's local runner, every task a subprocess of this Python (the "
    "embedded default).",
)
@click.option(
    "--docker",
    "docker",
    is_flag=True,
    help="Run the compiled pipeline (conductor_pipelines/compiled/NAME.yaml, what the Kubeflow UI "
    "gets) with every task in a container of the image it names (`make images` builds them), "
    "sharing only KFP's artifacts, S3 and MLflow; without MLFLOW_TRACKING_URI and an S3 endpoint "
    "both are started on 127.0.0.1 for the run.",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    default="runs",
    show_default=True,
    help="Folder of the run's outputs, artifacts, logs and the SQLite MLflow store.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="A pipeline parameter, e.g. --set base_steps=50 (repeatable).",
)
@click.option("--verbose", is_flag=True, help="Show every task's log (always in the log file).")
@click.option(
    "--resume",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[RUN]",
    help="Take up a killed run under --root (RUN: its id, from the first line it printed; "
    "default: the newest): its finished tasks are reused with their outputs, the interrupted "
    "stage resumes from its checkpoint, its MLflow runs go on. The run keeps its parameters (a "
    "--set that differs is refused) and its backend; a --docker run needs the MLflow and S3 it "
    "ran with (MLFLOW_TRACKING_URI and an S3 endpoint).",
)
@click.option(
    "--compiled",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="With --docker: the compiled YAML to run (default "
    "conductor_pipelines/compiled/NAME.yaml), e.g. one compiled with --images.",
)
@click.option(
    "--pull",
    is_flag=True,
    help="With --docker: pull the images the engine lacks from their registry (without it, only "
    "images of a registry on 127.0.0.1/localhost are pulled; others must be built here).",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="KFP's local task cache off: no task is answered from a cached output, not even one "
    "of this run's own; the run then cannot be resumed (a run never reuses another run's "
    "outputs either way).",
)
def run_cmd(name, local, docker, root, sets, verbose, resume, compiled, pull, no_cache) -> None:
    """Run a pipeline end to end on this machine and print its summary (a cluster run is
    `submit`)."""
    from conductor_pipeline_runner.local import run_local
    from conductor_pipeline_runner.summary import render_summary

    if local == docker:
        raise click.UsageError("give exactly one of --local and --docker")
    if (compiled or pull) and not docker:
        raise click.UsageError("--compiled and --pull go with --docker")
    if no_cache and resume is not None:
        raise click.UsageError(
            "--no-cache and --resume do not go together: a resumed run reuses its finished "
            "tasks from the cache"
        )
    params = _parse_sets(sets)
    where = "in containers" if docker else "locally"
    click.echo(f"running pipeline {name} {where} under {Path(root).resolve()}", err=True)
    resumed = False if resume is None else (resume or True)
    try:
        result = run_local(
            name,
            params,
            root=root,
            verbose=verbose,
            containers=docker,
            resume=resumed,
            compiled=Path(compiled) if compiled else None,
            pull=pull,
            caching=not no_cache,
        )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    summary = render_summary(
        result, root=Path(root).resolve(), pool=str(params.get("pool", "bundled"))
    )
    click.echo(summary)
    if not result.ok:
        click.echo(f"pipeline {name} FAILED: {result.error}\nlog: {result.log_path}", err=True)
        sys.exit(1)


def _kfp_options(func):
    """The options of ``submit`` and ``schedule``: where, what and how to upload."""
    options = [
        click.option("--host", required=True, help="Kubeflow Pipelines API endpoint URL."),
        click.option(
            "--package",
            type=click.Path(dir_okay=False),
            default=None,
            help="Compiled YAML (default: conductor_pipelines/compiled/<name>.yaml).",
        ),
        click.option("--version", "version_name", default=None, help="Pipeline version name."),
        click.option(
            "--experiment", default="conductor", show_default=True, help="KFP experiment."
        ),
        click.option("--namespace", default=None, help="Kubeflow namespace (multi-user installs)."),
        click.option(
            "--token-env",
            default=None,
            help="NAME of the environment variable holding a bearer token for the endpoint.",
        ),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A run parameter."),
        click.option(
            "--service-account",
            default=None,
            metavar="NAME",
            help="Kubernetes service account the run's pods use (default: KFP's, pipeline-runner "
            "standalone or default-editor multi-user); it needs the conductor-training-rbac "
            "chart's permissions to launch TrainJobs.",
        ),
        click.option(
            "--no-cache",
            is_flag=True,
            help="Turn KFP's execution cache off for every task: no task is answered from an "
            "earlier run's outputs (the version uploaded has caching off).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@command.command("submit")
@click.argument("name", type=click.Choice(NAMES))
@_kfp_options
@click.option("--run-name", default=None, help="Run name (default: the pipeline and a time).")
def submit_cmd(
    name,
    host,
    package,
    version_name,
    experiment,
    namespace,
    token_env,
    sets,
    service_account,
    no_cache,
    run_name,
) -> None:
    """Upload a pipeline version and start a run on a Kubeflow Pipelines endpoint (KFP 2.17 or
    newer: an older server is refused, one that reports no version gets a warning)."""
    from conductor_pipeline_runner.submit import submit

    token = _token(token_env)
    result = submit(
        package or COMPILED_DIR / f"{name}.yaml",
        host=host,
        pipeline_name=f"conductor-{name}",
        version_name=version_name,
        experiment=experiment,
        run_name=run_name,
        params=_parse_sets(sets),
        namespace=namespace,
        existing_token=token,
        service_account=service_account,
        caching=not no_cache,
    )
    click.echo(json.dumps(result.to_dict(), indent=2))


@command.command("schedule")
@click.argument("name", type=click.Choice(NAMES))
@_kfp_options
@click.option(
    "--cron",
    default=None,
    metavar="EXPR",
    help="When to run: standard cron, 5 fields ('0 2 * * *': 02:00 every day, the cluster's "
    "time), KFP's 6 fields (seconds first) or a descriptor (@daily, @every 12h).",
)
@click.option(
    "--every",
    "every",
    default=None,
    metavar="INTERVAL",
    help="Or run at an interval: seconds, or a number with s, m, h or d (6h).",
)
@click.option(
    "--max-concurrency",
    type=click.IntRange(1, 10),
    default=1,
    show_default=True,
    help="Runs of the schedule at once; a run that falls due while they go waits.",
)
@click.option(
    "--catchup/--no-catchup",
    default=False,
    show_default=True,
    help="Start the runs missed while the schedule was paused, one per missed time (default: "
    "only the latest).",
)
@click.option("--start", "start_time", default=None, help="Start, ISO 8601 (UTC without a zone).")
@click.option("--end", "end_time", default=None, help="End, ISO 8601 (default: never).")
@click.option("--disabled", is_flag=True, help="Create it paused (enable it in the KFP UI).")
@click.option(
    "--name",
    "schedule_name",
    default=None,
    help="The recurring run's name (default: the pipeline and its schedule).",
)
def schedule_cmd(
    name,
    host,
    package,
    version_name,
    experiment,
    namespace,
    token_env,
    sets,
    service_account,
    no_cache,
    cron,
    every,
    max_concurrency,
    catchup,
    start_time,
    end_time,
    disabled,
    schedule_name,
) -> None:
    """Upload a pipeline version and create a recurring run of it on a Kubeflow Pipelines
    endpoint: on a cron schedule (--cron) or at an interval (--every)."""
    from conductor_pipeline_runner.submit import schedule

    if (cron is None) == (every is None):
        raise click.UsageError("give --cron or --every (one of the two)")
    token = _token(token_env)
    result = schedule(
        package or COMPILED_DIR / f"{name}.yaml",
        host=host,
        pipeline_name=f"conductor-{name}",
        cron=cron,
        interval_s=every,
        max_concurrency=max_concurrency,
        catchup=catchup,
        start_time=start_time,
        end_time=end_time,
        enabled=not disabled,
        name=schedule_name,
        version_name=version_name,
        experiment=experiment,
        params=_parse_sets(sets),
        namespace=namespace,
        existing_token=token,
        service_account=service_account,
        caching=not no_cache,
    )
    click.echo(json.dumps(result.to_dict(), indent=2))
