"""Behaviour of the code sandbox API: results, limits, files, env, backends, concurrency."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

import pytest

from conductor_core.errors import ConfigError
from conductor_core.tasks import sandbox
from conductor_core.tasks.sandbox import (
    LocalSandbox,
    SandboxLimits,
    SandboxResult,
    arun_python,
    isolation_report,
    run_python,
)

SMALL = SandboxLimits(cpu_s=2, wall_s=5, memory_mb=512, max_processes=16, output_bytes=20_000)


def test_ok_program_captures_stdout_and_stderr():
    r = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)\n", limits=SMALL)
    assert r.status == "ok" and r.ok and r.returncode == 0
    assert r.stdout == "out\n"
    assert r.stderr == "err\n"
    assert r.wall_s > 0 and r.isolation


def test_failing_assert_is_error_with_reason():
    r = run_python("def f():\n    return 1\nassert f() == 2, 'wrong answer'\n", limits=SMALL)
    assert r.status == "error" and r.returncode == 1
    assert "AssertionError: wrong answer" in r.reason
    assert not r.infra_error


def test_exit_code_is_reported():
    r = run_python("import sys\nsys.exit(7)\n", limits=SMALL)
    assert (r.status, r.returncode) == ("error", 7)


def test_stdin_and_files_are_visible_and_importable():
    files = {"helper.py": "def twice(x):\n    return 2 * x\n", "data/in.txt": "5\n"}
    code = (
        "import sys\nfrom helper import twice\n"
        "n = int(open('data/in.txt').read())\n"
        "print(twice(n), sys.stdin.read().strip()[::-1])\n"
    )
    r = run_python(code, stdin="abc\n", files=files, limits=SMALL)
    assert r.status == "ok", r.reason
    assert r.stdout.strip() == "10 cba"


def test_large_stdin_and_stdout_do_not_deadlock():
    data = "x" * 300_000
    limits = SandboxLimits(wall_s=10, output_bytes=1_000_000)
    r = run_python("import sys\nsys.stdout.write(sys.stdin.read())\n", stdin=data, limits=limits)
    assert r.status == "ok", r.reason
    assert len(r.stdout) == 300_000


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_FAKE_SECRET", "sk-do-not-leak-42")
    r = run_python("import os\nprint(dict(os.environ))\n", limits=SMALL)
    assert r.status == "ok"
    assert "sk-do-not-leak-42" not in r.stdout
    assert "CONDUCTOR_FAKE_SECRET" not in r.stdout
    assert "'HOME'" in r.stdout and "'PATH'" in r.stdout


def test_workdir_is_fresh_and_removed(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = run_python("open('left.txt', 'w').write('x')\n", limits=SMALL)
    second = run_python("import os\nprint(sorted(os.listdir('.')))\n", limits=SMALL)
    assert first.status == "ok" and second.status == "ok"
    assert "left.txt" not in second.stdout
    assert list(tmp_path.iterdir()) == []


def test_limits_validation_names_the_field():
    with pytest.raises(ValueError, match=r"SandboxLimits\.wall_s"):
        SandboxLimits(wall_s=0)
    with pytest.raises(ValueError, match=r"SandboxLimits\.memory_mb"):
        SandboxLimits(memory_mb=-1)
    assert SandboxLimits(file_size_mb=16).tmpfs_mb == 64


@pytest.mark.parametrize("name", ["/etc/passwd", "../x.py", "main.py", ""])
def test_bad_file_names_are_rejected(name):
    with pytest.raises(ValueError, match="sandbox files key"):
        run_python("pass", files={name: "x"})


def test_result_to_dict_is_json_ready():
    r = SandboxResult("ok", 0, "a", "", 0.1, "exit code 0", ("bwrap", "net-ns"))
    d = r.to_dict()
    assert d["isolation"] == ["bwrap", "net-ns"] and d["status"] == "ok"


def test_isolation_report_describes_host():
    rep = isolation_report()
    assert rep["mode"] in ("zygote", "bwrap", "unshare", "rlimits")
    assert "rlimits" in rep["available"]
    assert isinstance(rep["isolation"], list) and "env-scrubbed" in rep["isolation"]
    assert rep["max_concurrency"] >= 1


def test_rlimits_fallback_mode_still_limits():
    sb = LocalSandbox("rlimits")
    r = sb.run("print(1 + 1)\n", limits=SMALL)
    assert r.status == "ok" and r.stdout == "2\n"
    assert "no-namespaces" in r.isolation
    t = sb.run("import time\ntime.sleep(30)\n", limits=SandboxLimits(wall_s=1))
    assert t.status == "timeout" and t.wall_s < 3


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


def test_arun_python_is_bounded_and_independent():
    code = "import time, sys\ntime.sleep(0.4)\nprint(sys.stdin.read())\n"
    old = sandbox.max_concurrency()

    async def main():
        return await asyncio.gather(
            *(arun_python(code, stdin=str(i), limits=SMALL) for i in range(4))
        )

    try:
        sandbox.set_max_concurrency(2)
        t0 = time.monotonic()
        results = asyncio.run(main())
        elapsed = time.monotonic() - t0
    finally:
        sandbox.set_max_concurrency(old)
    assert [r.stdout.strip() for r in results] == ["0", "1", "2", "3"]
    assert all(r.status == "ok" for r in results)
    # 4 runs of >= 0.4 s with 2 at a time take at least two rounds.
    assert elapsed >= 0.8


def test_set_max_concurrency_validates():
    with pytest.raises(ValueError, match="max concurrency"):
        sandbox.set_max_concurrency(0)


def test_concurrency_env_is_validated(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_SANDBOX_CONCURRENCY", "lots")
    monkeypatch.setattr(sandbox, "_max_concurrency", None)
    with pytest.raises(ConfigError, match="CONDUCTOR_SANDBOX_CONCURRENCY"):
        sandbox.max_concurrency()


def test_host_temp_dir_is_not_world_readable(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[int] = []
    real_mkdtemp = tempfile.mkdtemp

    def spy(*args, **kwargs):
        path = real_mkdtemp(*args, **kwargs)
        seen.append(os.stat(path).st_mode & 0o777)
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    # Modes that stage files on the host (zygote mode writes them inside its own tmpfs).
    from conductor_core.tasks.sandbox.local import LocalSandbox

    assert LocalSandbox("rlimits").run("pass\n", limits=SMALL).status == "ok"
    assert seen == [0o700]
