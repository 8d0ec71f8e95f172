"""The zygote isolation mode: same guarantees as bwrap, no state shared between runs, a dead
zygote gives sandbox_error (never a pass) and is replaced. Skipped where the mode cannot work
(no bubblewrap, or not root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conductor_core.tasks.sandbox import LocalSandbox, SandboxLimits
from conductor_core.tasks.sandbox.isolation import UID_BASE, UID_SPAN
from conductor_core.tasks.sandbox.zygote import ISOLATION_TAGS, zygote_supported

pytestmark = pytest.mark.skipif(
    not zygote_supported(), reason="zygote mode needs bubblewrap and a root host process"
)
REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(cpu_s=2, wall_s=5, memory_mb=512, max_processes=16, output_bytes=20_000)


@pytest.fixture
def sb():
    # Per test: a zygote forks a fresh runner after each run, which a longer-lived sandbox
    # would leave running past the test.
    box = LocalSandbox("zygote")
    yield box
    box.close()


def test_mode_and_isolation_tags(sb):
    rep = sb.report()
    assert rep["mode"] == "zygote"
    for tag in ("zygote", "pid-ns", "net-ns", "mount-ns", "own-uid", "nproc-limit"):
        assert tag in rep["isolation"]
    r = sb.run("print(6 * 7)\n", limits=LIMITS)
    assert (r.status, r.stdout, r.returncode) == ("ok", "42\n", 0)
    assert r.isolation == ISOLATION_TAGS


def test_each_run_has_own_uid_pid_namespace_and_no_extra_fds(sb):
    code = (
        "import os\n"
        "print(os.getuid(), os.getgid(), os.getgroups(), os.getpid())\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
    )
    first = sb.run(code, limits=LIMITS)
    second = sb.run(code, limits=LIMITS)
    assert first.status == "ok" and second.status == "ok", (first, second)
    uids = []
    for r in (first, second):
        ids, pids, fds = r.stdout.splitlines()
        uid, gid, groups, pid = ids.split()
        assert UID_BASE <= int(uid) < UID_BASE + UID_SPAN and uid == gid
        assert groups == "[]" and pid == "2"  # pid 1 is the run's own init
        assert pids == "[1, 2]"  # nothing of the zygote or other runs is visible
        assert fds == "[0, 1, 2, 3]"  # stdio + the listdir handle: no control socket
        uids.append(uid)
    assert uids[0] != uids[1]


def test_no_state_leaks_between_runs(sb):
    first = sb.run(
        "import math, os, sys\n"
        "math.LEAK = 1\nsys.LEAK = 1\nos.environ['LEAK'] = '1'\n"
        "open('/tmp/leak', 'w').write('x')\nopen('leak.txt', 'w').write('x')\n",
        limits=LIMITS,
    )
    second = sb.run(
        "import math, os, sys\n"
        "print(hasattr(math, 'LEAK'), hasattr(sys, 'LEAK'), 'LEAK' in os.environ,\n"
        "      os.path.exists('/tmp/leak'), sorted(os.listdir('.')))\n",
        limits=LIMITS,
    )
    assert first.status == "ok", first
    assert second.stdout == "False False False False ['main.py']\n", second


def test_random_state_differs_between_runs(sb):
    code = "import random\nprint(random.random())\n"
    outs = {sb.run(code, limits=LIMITS).stdout for _ in range(3)}
    assert len(outs) == 3


def test_interpreter_top_level_behaviour(sb):
    r = sb.run("raise SystemExit('bye')\n", limits=LIMITS)
    assert (r.status, r.returncode, r.reason) == ("error", 1, "bye")
    r = sb.run("import sys\nsys.exit(5)\n", limits=LIMITS)
    assert (r.status, r.returncode) == ("error", 5)
    r = sb.run("def f(:\n", limits=LIMITS)
    assert r.status == "error" and "SyntaxError" in r.reason
    r = sb.run(
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('late'))).start()\n",
        limits=LIMITS,
    )
    assert r.status == "ok" and r.stdout == "late\n"  # non-daemon threads are awaited
    r = sb.run("import atexit\natexit.register(print, 'bye')\n", limits=LIMITS)
    assert r.stdout == "bye\n"


def test_dead_zygote_gives_sandbox_error_then_recovers():
    box = LocalSandbox("zygote")
    try:
        assert box.run("pass\n", limits=LIMITS).status == "ok"
        zygote = box._zygote_pool()._idle[0]
        holder: dict = {}
        t = threading.Thread(
            target=lambda: holder.update(r=box.run("import time\ntime.sleep(30)\n", limits=LIMITS))
        )
        t.start()
        time.sleep(0.5)
        os.killpg(zygote.proc.pid, signal.SIGKILL)
        t.join(timeout=20)
        assert holder["r"].status == "sandbox_error", holder["r"]
        assert holder["r"].returncode is None
        again = box.run("print('back')\n", limits=LIMITS)
        assert again.status == "ok" and again.stdout == "back\n"
    finally:
        box.close()


@pytest.mark.slow
def test_adversarial_suite_in_the_other_mode():
    """The adversarial suite runs in the default mode with the rest of the tests; run it once
    more with the other of zygote/bwrap forced, so that both modes stay covered."""
    default = LocalSandbox().mode()
    other = "bwrap" if default == "zygote" else "zygote"
    env = {**os.environ, "CONDUCTOR_SANDBOX_ISOLATION": other}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests/integration/test_sandbox_adversarial.py"),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout
