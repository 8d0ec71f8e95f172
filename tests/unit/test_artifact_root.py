"""No shared disk between a run's pods: the parameter check accepts only an artifact root the
tasks can share (``s3://`` with credentials, or a folder the cluster settings declare shared), from
the settings the pipeline was compiled with; the S3 endpoint and Secret come from those settings.
(Compiling afresh with such settings: tests/integration/test_pipelines_compile.py.)"""

from __future__ import annotations

import re

import pytest
import yaml

from conductor_core.cluster.settings import POD_KINDS, ClusterSettings, load_cluster_settings
from conductor_core.errors import ConfigError
from conductor_core.pipeline_steps.params import check_artifact_root, check_training_params

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}


def test_an_empty_or_local_root_is_rejected_in_one_line_without_shared_paths(tmp_path):
    for root, said in (("", "empty, so ./runs/pipelines"), (str(tmp_path), repr(str(tmp_path)))):
        _, problems = check_artifact_root(root, s3_secret="conductor-s3", environ={})
        assert len(problems) == 1 and "\n" not in problems[0]
        assert problems[0].startswith(f"artifact_root: {said} is a folder on this pod's own disk")
        assert "give s3://bucket/prefix" in problems[0]
    # $CONDUCTOR_ARTIFACT_ROOT set to a local folder on the pod is no better
    _, problems = check_artifact_root("", environ={"CONDUCTOR_ARTIFACT_ROOT": "/data"})
    assert "$CONDUCTOR_ARTIFACT_ROOT ('/data')" in problems[0]


def test_a_folder_under_a_shared_path_is_accepted_and_slash_shares_every_folder(tmp_path):
    assert check_artifact_root("/workspace/runs", shared_paths=["/workspace"], environ={}) == (
        "/workspace/runs",
        [],
    )
    _, problems = check_artifact_root("/workspacex/runs", shared_paths=["/workspace"], environ={})
    assert "or a folder under /workspace" in problems[0]
    # the local run: every folder is shared, the empty root falls back as every task resolves it
    env = {"CONDUCTOR_ARTIFACT_ROOT": str(tmp_path / "pipelines")}
    assert check_artifact_root("", shared_paths=["/"], environ=env) == (
        str(tmp_path / "pipelines"),
        [],
    )
    _, problems = check_artifact_root(
        str(tmp_path), shared_paths=["/"], launcher="trainjob", environ={}
    )
    assert "launcher=trainjob needs s3://" in problems[0]


def test_an_s3_root_needs_credentials_and_the_error_names_the_secret():
    root, problems = check_artifact_root("s3://bucket/p", s3_secret="conductor-s3", environ={})
    assert root == "s3://bucket/p"
    assert problems == [
        "artifact_root s3://bucket/p: no S3 credentials in the task's environment "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY unset); create the Secret 'conductor-s3' "
        "with the keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY in the run's namespace"
    ]
    assert check_artifact_root("s3://bucket/p", environ=CREDENTIALS) == ("s3://bucket/p", [])
    role = {"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ROLE_ARN": "arn:aws:iam::1:r"}
    assert check_artifact_root("s3://bucket/p", environ=role)[1] == []
    assert "no bucket name" in check_artifact_root("s3:///p", environ=CREDENTIALS)[1][0]
    # the settings' default is used when the parameter is empty
    assert check_artifact_root("", default="s3://b/x", environ=CREDENTIALS) == ("s3://b/x", [])


def test_the_training_check_reports_the_root_with_the_other_parameters(monkeypatch):
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    good = {"profile": "tiny", "launcher": "pod", "metric": "accuracy", "baselines": "moa"}
    with pytest.raises(ConfigError) as err:
        check_training_params(**{**good, "profile": "tinny"}, artifact_root="")
    assert "profile: 'tinny'" in str(err.value) and "artifact_root: empty" in str(err.value)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    checked = check_training_params(**good, artifact_root="s3://b/p", s3_secret="conductor-s3")
    assert checked["artifact_root"] == "s3://b/p"


def test_settings_give_the_default_root_the_shared_paths_and_the_s3_endpoint():
    settings = load_cluster_settings(
        overrides={
            "artifact_root": "s3://team/conductor",
            "s3_endpoint": "http://minio.minio:9000",
            "shared_paths": ["/workspace/"],
        }
    )
    assert settings.shared_paths == ["/workspace"]
    for pod in (getattr(settings, kind) for kind in POD_KINDS):
        assert pod.env["CONDUCTOR_ARTIFACT_ROOT"] == "s3://team/conductor"
        assert pod.env["AWS_ENDPOINT_URL"] == pod.env["MLFLOW_S3_ENDPOINT_URL"]
        assert pod.env["MLFLOW_S3_ENDPOINT_URL"] == "http://minio.minio:9000"
    # TrainJob nodes take their environment from the gpu settings
    names = {e["name"] for e in settings.gpu.env_vars()}
    assert {"AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "CONDUCTOR_ARTIFACT_ROOT"} <= names
    # validating again (a round trip) changes nothing
    assert ClusterSettings.model_validate(settings.model_dump()) == settings
    # the variable the settings set is the one every task reads
    from conductor_core.cluster import settings as cluster_settings
    from conductor_core.pipeline_steps import context

    assert cluster_settings.ARTIFACT_ROOT_ENV == context.ARTIFACT_ROOT_ENV


@pytest.mark.parametrize(
    ("overrides", "hint"),
    [
        ({"artifact_root": "/data/runs"}, "neither s3://bucket/prefix nor under one of"),
        ({"artifact_root": "runs", "shared_paths": ["/"]}, "neither s3://"),
        ({"shared_paths": ["workspace"]}, "must be an absolute path"),
        ({"s3_endpoint": "minio:9000"}, "is not an http(s):// URL"),
        (
            {"s3_endpoint": "http://a:9000", "cpu": {"env": {"AWS_ENDPOINT_URL": "http://b"}}},
            "cpu.env sets AWS_ENDPOINT_URL too; set it once, in s3_endpoint",
        ),
    ],
)
def test_bad_storage_settings_name_the_field(overrides, hint):
    with pytest.raises(ConfigError, match=re.escape(hint)):
        load_cluster_settings(overrides=overrides)


def test_the_bundled_settings_mount_the_s3_secret_optional_and_give_no_default_root(monkeypatch):
    monkeypatch.delenv("CONDUCTOR_CLUSTER_SETTINGS", raising=False)
    settings = load_cluster_settings()
    assert settings.artifact_root is None and settings.shared_paths == []
    assert settings.s3_secret() == "conductor-s3"
    for pod in (getattr(settings, kind) for kind in POD_KINDS):
        s3 = [s for s in pod.secret_env if s.secret_name == "conductor-s3"]
        assert {s.env for s in s3} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        # optional: a missing Secret must not hold the pods; the parameter check names it
        assert all(s.optional for s in s3)
        assert "CONDUCTOR_ARTIFACT_ROOT" not in pod.env


def test_the_local_run_shares_every_folder_and_drops_the_clusters_root():
    from conductor_pipeline_runner.local import local_settings

    settings = local_settings()
    assert settings.shared_paths == ["/"]
    assert settings.artifact_root is None and settings.s3_endpoint is None
    assert all(getattr(settings, kind).env == {} for kind in POD_KINDS)


def _committed_check_task() -> tuple[dict, dict]:
    from conductor_pipelines.registry import COMPILED_DIR

    spec = next(yaml.safe_load_all((COMPILED_DIR / "training.yaml").read_text()))
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    task = next(d["tasks"]["check-params"] for d in dags if "check-params" in d["tasks"])
    return spec, task["inputs"]["parameters"]


def _pipeline_parameter(ref: str) -> str:
    """The pipeline parameter a task input names (inside a sub-DAG KFP prefixes it)."""
    return ref.removeprefix("pipelinechannel--")


def test_the_committed_pipeline_rejects_an_empty_or_local_root_before_training(monkeypatch):
    """What the UI and the container rehearsal run: the check task gets the bundled settings'
    rules as constants, and with them the empty default and a local folder stop the run."""
    from conductor_components.check_params import check_params

    spec, inputs = _committed_check_task()
    constants = {k: v["runtimeValue"]["constant"] for k, v in inputs.items() if "runtimeValue" in v}
    assert constants["shared_paths"] == [] and constants["s3_secret"] == "conductor-s3"
    assert _pipeline_parameter(inputs["artifact_root"]["componentInputParameter"]) == (
        "artifact_root"
    )
    params = spec["root"]["inputDefinitions"]["parameters"]
    defaults = {k: p.get("defaultValue") for k, p in params.items()}
    args = {
        **{
            k: defaults[_pipeline_parameter(v["componentInputParameter"])]
            for k, v in inputs.items()
            if "componentInputParameter" in v
        },
        **constants,
    }
    monkeypatch.delenv("CONDUCTOR_ARTIFACT_ROOT", raising=False)
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(
        ConfigError, match=re.escape("artifact_root: empty, so ./runs/pipelines is a folder")
    ):
        check_params.python_func(**args)
    with pytest.raises(ConfigError, match="artifact_root: '/tmp/runs' is a folder on this pod"):
        check_params.python_func(**{**args, "artifact_root": "/tmp/runs"})
    with pytest.raises(ConfigError, match="create the Secret 'conductor-s3'"):
        check_params.python_func(**{**args, "artifact_root": "s3://b/p"})
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    checked = check_params.python_func(**{**args, "artifact_root": "s3://b/p"}).checked
    assert "artifact_root=s3://b/p" in checked
