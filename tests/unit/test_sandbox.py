"""The code sandbox API without running a program: limits and results validated, the isolation and
concurrency settings checked, and the backend hook (programs run in a sandbox:
tests/integration/test_sandbox.py)."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.tasks import sandbox
from conductor_core.tasks.sandbox import (
    LocalSandbox,
    SandboxLimits,
    SandboxResult,
    isolation_report,
    run_python,
)


def test_limits_validation_names_the_field():
    with pytest.raises(ValueError, match=r"SandboxLimits\.wall_s"):
        SandboxLimits(wall_s=0)
    with pytest.raises(ValueError, match=r"SandboxLimits\.memory_mb"):
        SandboxLimits(memory_mb=-1)
    assert SandboxLimits(file_size_mb=16).tmpfs_mb == 64


def test_result_to_dict_is_json_ready():
    r = SandboxResult("ok", 0, "a", "", 0.1, "exit code 0", ("bwrap", "net-ns"))
    d = r.to_dict()
    assert d["isolation"] == ["bwrap", "net-ns"] and d["status"] == "ok"


def test_bad_isolation_setting_is_a_config_error(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_SANDBOX_ISOLATION", "docker")
    with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_ISOLATION"):
        LocalSandbox()


class _FakeBackend:
    name = "fake"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, code, *, stdin="", limits=None, files=None):
        self.calls.append(code)
        return SandboxResult("ok", 0, "remote", "", 0.0, "exit code 0", ("remote-pod",))

    def report(self):
        return {"backend": self.name, "mode": "remote", "isolation": ["remote-pod"]}


def fake_backend_factory():
    """Used through CONDUCTOR_SANDBOX_BACKEND in the test below."""
    return _FakeBackend()


def test_backend_hook_by_setter_and_env(monkeypatch):
    try:
        fake = _FakeBackend()
        sandbox.set_backend(fake)
        assert run_python("print(1)").stdout == "remote"
        assert fake.calls == ["print(1)"]
        sandbox.set_backend(None)
        monkeypatch.setenv("CONDUCTOR_SANDBOX_BACKEND", f"{__name__}:fake_backend_factory")
        assert isolation_report()["mode"] == "remote"
        sandbox.set_backend(None)
        monkeypatch.setenv("CONDUCTOR_SANDBOX_BACKEND", "no_such_module_xyz:make")
        with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_BACKEND"):
            run_python("print(1)")
    finally:
        sandbox.set_backend(None)


def test_set_max_concurrency_validates():
    with pytest.raises(ValueError, match="max concurrency"):
        sandbox.set_max_concurrency(0)


def test_concurrency_env_is_validated(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_SANDBOX_CONCURRENCY", "lots")
    monkeypatch.setattr(sandbox, "_max_concurrency", None)
    with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_CONCURRENCY"):
        sandbox.max_concurrency()


# ----------------------------------------------- no namespaces: refused unless said in words


def _probe_passes_in(*modes: str):
    """A stand-in for LocalSandbox._run_in: the self-test passes in ``modes``, fails elsewhere;
    no process is started."""

    def probe(self, mode, code, stdin, limits, files):
        if mode in modes:
            return SandboxResult("ok", 0, "sandbox-ok\n", "", 0.0, "exit code 0", ())
        return SandboxResult("sandbox_error", None, "", "", 0.0, f"{mode}: no namespaces", ())

    return probe


@pytest.fixture
def no_namespaces(monkeypatch):
    """A host where only the rlimits mode is left (bwrap and unshare absent or failing their
    self-test, as under Docker's default seccomp profile): no process is started."""
    from conductor_core.tasks.sandbox import local

    failing_probe = _probe_passes_in("rlimits")

    monkeypatch.setattr(local, "available_modes", lambda: ["bwrap", "unshare", "rlimits"])
    monkeypatch.setattr(local.LocalSandbox, "_run_in", failing_probe)
    monkeypatch.delenv("CONDUCTOR_SANDBOX_FALLBACK", raising=False)
    monkeypatch.delenv("CONDUCTOR_SANDBOX_ISOLATION", raising=False)
    return monkeypatch


def test_without_namespaces_generated_code_is_refused_naming_the_setting(no_namespaces):
    box = LocalSandbox()
    with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_FALLBACK=limits-only") as err:
        box.run("print(1)")
    assert "bwrap: no namespaces" in str(err.value) and "unshare" in str(err.value)
    with pytest.raises(ConfigError, match="refusing"):  # again, without testing again
        box.mode()
    report = box.report()
    assert report["mode"] == "refused" and "limits-only" in report["refusal"]


def test_a_code_grader_refuses_too(no_namespaces):
    problem = sandbox_problem()
    try:
        sandbox.set_backend(LocalSandbox())
        from conductor_core.tasks.grading import grade

        with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_FALLBACK"):
            grade(problem, "```python\nprint(input())\n```")
    finally:
        sandbox.set_backend(None)


@pytest.mark.parametrize(
    ("env", "kwargs"),
    [
        ({"CONDUCTOR_SANDBOX_FALLBACK": "limits-only"}, {}),
        ({}, {"fallback": "limits-only"}),
        ({"CONDUCTOR_SANDBOX_ISOLATION": "rlimits"}, {}),  # forcing the mode says so too
    ],
)
def test_limits_only_when_the_configuration_says_so(no_namespaces, env, kwargs):
    for name, value in env.items():
        no_namespaces.setenv(name, value)
    assert LocalSandbox(**kwargs).mode() == "rlimits"


def test_auto_takes_unshare_only_when_the_configuration_says_so(no_namespaces):
    """unshare leaves the host's files to the program (other runs' expected outputs, the model
    folder): ``auto`` falls back to it under the same opt-in as to limits only."""
    from conductor_core.tasks.sandbox import local

    no_namespaces.setattr(local.LocalSandbox, "_run_in", _probe_passes_in("unshare", "rlimits"))
    with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_FALLBACK=limits-only") as err:
        LocalSandbox().mode()
    assert "unshare would leave this machine's files readable" in str(err.value)
    assert "bwrap: no namespaces" in str(err.value)
    assert LocalSandbox(fallback="limits-only").mode() == "unshare"
    assert LocalSandbox("unshare").mode() == "unshare"  # forcing the mode says so too


@pytest.mark.parametrize("wanted", ["rlimits", "auto"])
def test_limits_only_is_refused_where_the_program_could_read_the_graders_env(monkeypatch, wanted):
    """No uid of its own (not root) and no Landlock: the program would share the grader's uid
    and /proc, so even limits-only is refused, naming why; no program is started."""
    from conductor_core.tasks.sandbox import isolation, local

    monkeypatch.setattr(isolation, "_is_root", lambda: False)
    monkeypatch.setattr(isolation, "landlock_abi", lambda: 0)
    monkeypatch.setattr(local, "available_modes", lambda: ["rlimits"])
    box = LocalSandbox(wanted, fallback="limits-only")
    with pytest.raises(ConfigError, match="cannot keep the grader's environment") as err:
        box.run("print(1)")
    assert "Landlock is unavailable" in str(err.value) and "not root" in str(err.value)
    if wanted == "auto":
        assert box.report()["mode"] == "refused"


def test_unshare_as_root_without_a_uid_of_its_own_is_refused(monkeypatch):
    """As real root the program could unmount its /proc and read the host's beneath it."""
    from conductor_core.tasks.sandbox import isolation

    monkeypatch.setattr(isolation, "_is_root", lambda: True)
    monkeypatch.setattr(isolation, "world_traversable", lambda path: False)
    with pytest.raises(ConfigError, match="'unshare' as root needs a uid of its own"):
        LocalSandbox("unshare").mode()


def test_bad_fallback_setting_is_a_config_error(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_SANDBOX_FALLBACK", "yes")
    with pytest.raises(ConfigError, match=r"CONDUCTOR_SANDBOX_FALLBACK.*refuse, limits-only"):
        LocalSandbox()


def sandbox_problem():
    from conductor_core.tasks.problem import Problem

    return Problem(
        id="echo",
        source="t",
        domain="code",
        question="Print the input line.",
        tests={"kind": "stdio", "cases": [{"input": "a\n", "output": "a\n"}]},
    )
