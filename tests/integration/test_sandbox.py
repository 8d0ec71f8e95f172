"""Programs run in the code sandbox: results, limits, files, a scrubbed environment, a fresh
working folder, the rlimits fallback, bounded concurrency (the API without running a program:
tests/unit/test_sandbox.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from conductor_core.tasks import sandbox
from conductor_core.tasks.sandbox import (
    LocalSandbox,
    SandboxLimits,
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


def test_workdir_is_fresh_and_removed(tmp_path):
    from conductor_core.tasks.sandbox.local import LocalSandbox

    box = LocalSandbox(scratch_dir=str(tmp_path))
    first = box.run("open('left.txt', 'w').write('x')\n", limits=SMALL)
    second = box.run("import os\nprint(sorted(os.listdir('.')))\n", limits=SMALL)
    box.close()
    assert first.status == "ok" and second.status == "ok"
    assert "left.txt" not in second.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["/etc/passwd", "../x.py", "main.py", ""])
def test_bad_file_names_are_rejected(name):
    with pytest.raises(ValueError, match="sandbox files key"):
        run_python("pass", files={name: "x"})


def test_isolation_report_describes_host():
    rep = isolation_report()
    assert rep["mode"] in ("zygote", "bwrap", "unshare", "rlimits")
    assert "rlimits" in rep["available"]
    assert isinstance(rep["isolation"], list)
    assert {"env-allowlist", "host-environ-unreadable"} <= set(rep["isolation"])
    assert rep["max_concurrency"] >= 1


def test_rlimits_fallback_mode_still_limits():
    sb = LocalSandbox("rlimits")
    r = sb.run("print(1 + 1)\n", limits=SMALL)
    assert r.status == "ok" and r.stdout == "2\n"
    assert "no-namespaces" in r.isolation
    t = sb.run("import time\ntime.sleep(30)\n", limits=SandboxLimits(wall_s=1))
    assert t.status == "timeout" and t.wall_s < 3


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


def test_host_temp_dir_is_not_world_readable(tmp_path):
    # Modes that stage files on the host (zygote mode writes them inside its own tmpfs); in
    # rlimits mode the program runs in that folder.
    from conductor_core.tasks.sandbox.local import LocalSandbox

    box = LocalSandbox("rlimits", scratch_dir=str(tmp_path))
    r = box.run("import os\nprint(oct(os.stat('.').st_mode & 0o777))\n", limits=SMALL)
    assert r.status == "ok", r.reason
    assert r.stdout.strip() == "0o700"
    assert list(tmp_path.iterdir()) == []
