"""Generated code never sees a secret (issue 44, section 1): in every isolation mode, limits
only included, a hostile program reads neither the grader's environment nor its memory, nor the
environment of any other process of the machine (a pod's PID 1 holds the same secrets).

Each seal is exercised where this host allows it: a root grader whose interpreter other users
cannot reach (Landlock and no capabilities), a root grader with a world-reachable interpreter
(a uid of its own per run) and a grader that is not root (Landlock; unshare maps its uid to
itself)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from conductor_core.errors import ConfigError
from conductor_core.tasks.sandbox import LocalSandbox, isolation
from conductor_core.tasks.sandbox.local import ALL_MODES

REPO = Path(__file__).resolve().parents[2]

NOBODY = 65534
# The grader: a process whose real environment (what /proc/PID/environ shows) holds the secret,
# running the program read from stdin in the mode given as argv[1]; with argv[2], first made an
# ordinary grader of that uid (not root, dumpable).
GRADER = textwrap.dedent(
    """
    import ctypes, json, os, sys
    if len(sys.argv) > 2:
        uid = int(sys.argv[2])
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, which the uid change cleared
    from conductor_core.errors import ConfigError
    from conductor_core.tasks.sandbox import LocalSandbox, SandboxLimits
    try:
        box = LocalSandbox(sys.argv[1])
        r = box.run(sys.stdin.read(), limits=SandboxLimits(wall_s=30, cpu_s=20))
    except ConfigError as exc:
        print(json.dumps({"refused": str(exc)}))
    else:
        print(json.dumps(r.to_dict()))
    """
)

# Everything a same-machine process could try: unmount its own /proc (under unshare the host's
# lies beneath), then the parent's environ, PID 1's, every process's (and thread's), and the
# parent's whole readable memory through /proc/PPID/mem.
HOSTILE = r"""
import ctypes, glob, os, re
ctypes.CDLL(None).umount2(b"/proc", 2)  # MNT_DETACH
ppid = os.getppid()
found, denied = [], set()
paths = [f"/proc/{ppid}/environ", "/proc/1/environ"]
paths += glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/task/*/environ")
for path in paths:
    try:
        with open(path, "rb") as fh:
            found.append(fh.read())
    except OSError:
        denied.add(path)
try:
    maps = open(f"/proc/{ppid}/maps").read().splitlines()
    mem = open(f"/proc/{ppid}/mem", "rb", buffering=0)
except OSError:
    denied.add("mem")
else:
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        for at in range(lo, hi, 1 << 24) if line.split()[1].startswith("r") else ():
            try:
                mem.seek(at)
                found.append(mem.read(min(hi - at, 1 << 24)))
            except (OSError, OverflowError, ValueError):
                break
secrets = re.findall(rb"sk-leak-[0-9a-f]{32}", b"".join(found))
print("SECRETS", sorted({s.decode() for s in secrets}))
print("PARENT-DENIED", f"/proc/{ppid}/environ" in denied and "mem" in denied)
"""


@functools.cache
def _world_python() -> str | None:
    """An interpreter every user can reach that imports the sandbox (stdlib only), if any."""
    for path in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if path and isolation.world_traversable(path):
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            check = [path, "-c", "import conductor_core.tasks.sandbox"]
            if subprocess.run(check, env=env, cwd=REPO, capture_output=True).returncode == 0:
                return path
    return None


def _grader(kind: str) -> tuple[str, list[str]]:
    """The interpreter and extra arguments of a grader of ``kind``, or a skip."""
    root = os.geteuid() == 0
    if kind == "as-is":
        return sys.executable, []
    if not root:
        pytest.skip(f"a {kind} grader needs this test to run as root")
    python = _world_python()
    if python is None:
        pytest.skip("no interpreter here that every user can reach")
    return python, ([str(NOBODY)] if kind == "not-root" else [])


@pytest.fixture
def secret_holders(request):
    """A fresh secret in the real environment of the grader and of a bystander process of the
    grader's user, as a pod's entrypoint (PID 1) would hold it: (secret, env, grader argv)."""
    python, extra = _grader(request.node.callspec.params["grader"])
    secret = f"sk-leak-{uuid.uuid4().hex}"
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": secret, "PYTHONPATH": str(REPO)}
    user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if extra else {}
    sleeper = [python, "-c", "import time; time.sleep(120)"]
    bystander = subprocess.Popen(sleeper, env=env, cwd=REPO, **user)
    try:
        yield secret, env, [python, "-c", GRADER, request.node.callspec.params["mode"], *extra]
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("grader", ["as-is", "root-world-python", "not-root"])
@pytest.mark.parametrize("mode", ALL_MODES)
def test_no_mode_lets_a_program_read_another_process_secret(secret_holders, mode, grader):
    secret, env, argv = secret_holders
    done = subprocess.run(
        argv,
        input=HOSTILE,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert secret not in done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "refused" in result or result["status"] == "sandbox_error":
        reason = result.get("refused") or result["reason"]
        # limits only is never skipped for a failing seal: only where none can exist here
        assert mode != "rlimits" or "cannot keep the grader's environment" in reason, reason
        pytest.skip(f"{mode} is not available here: {reason}")
    assert result["status"] == "ok", result
    assert "SECRETS []" in result["stdout"]  # the program ran its whole search and found nothing
    assert "host-environ-unreadable" in result["isolation"]
    if mode == "rlimits":  # the one mode where the grader is in the program's /proc
        assert "PARENT-DENIED True" in result["stdout"]
        assert {"own-uid", "landlock"} & set(result["isolation"])
        if grader == "root-world-python":
            assert "own-uid" in result["isolation"]


@pytest.mark.skipif(isolation.landlock_abi() < 2, reason="needs Landlock ABI 2+ (Linux 5.19+)")
def test_landlock_alone_hides_a_same_uid_parent():
    """The seal of a grader that is not root (no uid of its own for the program): its child reads
    the grader's environment without the seal and is refused with it."""
    probe = textwrap.dedent(
        """
        import ctypes, os
        from conductor_core.tasks.sandbox import isolation
        seal = isolation._sealer(drop_caps=False, landlock=True)
        if os.geteuid() == 0:  # become an ordinary grader: not root, dumpable
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
        def child(sealed):
            pid = os.fork()
            if pid == 0:
                if sealed:
                    seal()
                try:
                    open(f"/proc/{os.getppid()}/environ", "rb").read()
                except OSError:
                    os._exit(20)
                os._exit(10)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(child(False), child(True))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.stdout.split() == ["10", "20"], done.stderr


def test_an_unsealed_limits_only_run_stops_before_the_program(monkeypatch):
    """Should the seal ever fail to hold, the bootstrap finds the parent's environment readable
    and ends the run before the program: a sandbox error, never a leak."""
    monkeypatch.setattr(isolation, "world_traversable", lambda path: False)  # no uid of its own
    monkeypatch.setattr(isolation, "landlock_abi", lambda: 2)
    monkeypatch.setattr(isolation, "_sealer", lambda **_: lambda: None)  # a seal that does nothing
    box = LocalSandbox("rlimits")
    unsealed = "would hold capabilities|could read the grader's environment"  # root | not
    with pytest.raises(ConfigError, match=unsealed) as err:
        box.run("print('the program ran')\n")
    assert "the program ran" not in str(err.value)
