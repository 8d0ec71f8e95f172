"""Hostile programs: each one is contained, graded as a failure with a reason, and leaves the
host and concurrent runs unharmed. Needs a namespace sandbox (bubblewrap) for the attacks that
reach outside the process; those are skipped, with the reason, on a host without one."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conductor_core.tasks import sandbox
from conductor_core.tasks.sandbox import SandboxLimits, arun_python, isolation_report, run_python
from conductor_core.tasks.sandbox.isolation import UID_BASE, UID_SPAN

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(
    cpu_s=1, wall_s=3, memory_mb=256, max_processes=16, file_size_mb=1, output_bytes=10_000
)
REPORT = isolation_report()
NAMESPACED = "pid-ns" in REPORT["isolation"] and "net-ns" in REPORT["isolation"]
needs_ns = pytest.mark.skipif(
    not NAMESPACED,
    reason=f"needs a namespace sandbox (install bubblewrap); mode here: {REPORT['mode']}",
)

FORK_BOMB = "import os\nwhile True:\n    os.fork()\n"
MEMORY_BOMB = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n"
DISK_FILL = (
    "i = 0\nwhile True:\n    open(f'fill{i}.bin', 'wb').write(b'a' * (512 * 1024))\n    i += 1\n"
)
BIG_FILE = "open('big.bin', 'wb').write(b'a' * (8 * 1024 * 1024))\n"
FLOOD = "while True:\n    print('spam' * 100)\n"
SLEEPER = "import time\ntime.sleep(600)\n"
SPIN = "while True:\n    pass\n"


def _sandbox_uid_processes(settle_s: float = 10.0) -> list[int]:
    """Host pids still running under one of the sandbox's per-run uids, after giving the
    kernel up to ``settle_s`` to finish tearing down a killed namespace (a fork bomb's
    hundreds of processes took over 2 s to go on two cores busy with other tests)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = _scan_sandbox_uids()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _scan_sandbox_uids() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        if UID_BASE <= uid < UID_BASE + UID_SPAN:
            found.append(int(entry))
    return found


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def _host_can_fork() -> bool:
    return subprocess.run([sys.executable, "-c", "pass"], timeout=30).returncode == 0


def test_infinite_loop_hits_cpu_or_wall_limit():
    r = run_python(SPIN, limits=LIMITS)
    assert r.status == "timeout", r
    assert "limit" in r.reason
    assert r.wall_s < LIMITS.wall_s + 1.5


def test_sleeping_past_timeout_is_killed_quickly():
    r = run_python(SLEEPER, limits=LIMITS)
    assert r.status == "timeout"
    assert "wall-clock" in r.reason
    assert LIMITS.wall_s - 0.1 <= r.wall_s < LIMITS.wall_s + 1.0


@needs_ns
def test_fork_bomb_is_contained_and_host_still_forks():
    r = run_python(FORK_BOMB, limits=LIMITS)
    assert r.status in ("error", "timeout", "killed"), r
    assert r.reason
    assert "nproc-limit" in r.isolation
    assert _sandbox_uid_processes() == []
    assert _host_can_fork()


def test_memory_bomb_is_graded_memory():
    r = run_python(MEMORY_BOMB, limits=LIMITS)
    assert r.status == "memory", r
    assert "MemoryError" in r.reason
    assert _host_can_fork()


@needs_ns
def test_disk_fill_hits_tmpfs_cap():
    r = run_python(DISK_FILL, limits=LIMITS)
    assert r.status == "error"
    assert "No space left on device" in r.reason


def test_single_big_file_hits_file_size_limit():
    r = run_python(BIG_FILE, limits=LIMITS)
    assert r.status == "error"
    assert "File too large" in r.reason


def test_output_flood_is_capped():
    r = run_python(FLOOD, limits=LIMITS)
    assert r.status == "output_limit"
    assert len(r.stdout) + len(r.stderr) <= LIMITS.output_bytes
    assert r.wall_s < LIMITS.wall_s


def test_environment_secrets_are_not_visible(monkeypatch):
    secret = f"sk-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("CONDUCTOR_TEST_SECRET", secret)
    code = (
        "import os, glob\n"
        "seen = repr(dict(os.environ))\n"
        "for p in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        seen += open(p, 'rb').read().decode('latin-1')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(seen)\n"
        f"assert {secret!r} not in seen\n"
        "raise SystemExit('no secret found')\n"
    )
    r = run_python(code, limits=LIMITS)
    assert secret not in r.stdout + r.stderr
    assert r.status == "error" and r.reason == "no secret found"


@needs_ns
@pytest.mark.parametrize(
    "target",
    [
        "/etc/pwned-{tag}",
        str(REPO / "pwned-{tag}"),
        "/usr/pwned-{tag}",
        sys.prefix + "/pwned-{tag}",
    ],
)
def test_writing_outside_workdir_fails(target):
    path = target.format(tag=uuid.uuid4().hex[:8])
    r = run_python(f"open({path!r}, 'w').write('owned')\n", limits=LIMITS)
    assert r.status == "error"
    assert "Error" in r.reason
    assert not os.path.exists(path)


@needs_ns
def test_writing_to_tmp_stays_private():
    path = f"/tmp/pwned-{uuid.uuid4().hex[:8]}"
    r = run_python(f"open({path!r}, 'w').write('x')\nprint(open({path!r}).read())\n")
    assert r.status == "ok" and r.stdout == "x\n"  # a private tmpfs inside the sandbox
    assert not os.path.exists(path)


@needs_ns
def test_network_connection_fails_and_listener_sees_nothing():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        code = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
        )
        r = run_python(code, limits=LIMITS)
        assert r.status == "error"
        assert "ConnectionRefusedError" in r.reason or "unreachable" in r.reason
        with pytest.raises(BlockingIOError):
            listener.accept()
        outside = run_python(
            "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\n",
            limits=LIMITS,
        )
        assert outside.status == "error"
        assert "unreachable" in outside.reason or "OSError" in outside.reason
    finally:
        listener.close()


@needs_ns
def test_signalling_parent_and_test_group_fails():
    me, my_group = os.getpid(), os.getpgid(0)
    code = (
        "import os, signal\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
        f"os.killpg({my_group}, signal.SIGKILL)\n"
        f"os.kill({me}, signal.SIGKILL)\n"
    )
    r = run_python(code, limits=LIMITS)
    assert r.status == "error"
    assert "ProcessLookupError" in r.reason or "PermissionError" in r.reason
    assert os.getpid() == me  # we are still here
    os.kill(me, 0)


@needs_ns
def test_daemonized_grandchild_dies_with_the_run():
    token = f"sbx-daemon-{uuid.uuid4().hex}"
    code = (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', "
        f"'import time; time.sleep(60)', {token!r}])\n"
        "    os._exit(0)\n"
        "import time\n"
        "time.sleep(0.3)\n"
        "raise SystemExit('parent exits, daemon left behind')\n"
    )
    r = run_python(code, limits=LIMITS)
    assert r.status == "error" and "daemon left behind" in r.reason
    assert r.wall_s < LIMITS.wall_s
    assert _processes_with(token) == []


@needs_ns
@pytest.mark.slow  # seven attacks at once next to a benign run (~6 s)
def test_bombs_do_not_harm_a_concurrent_benign_run():
    benign = "import math\nprint(sum(math.isqrt(i) for i in range(200000)))\n"
    expected = str(sum(__import__("math").isqrt(i) for i in range(200000)))
    attacks = {
        "spin": (SPIN, {"timeout"}),
        "fork": (FORK_BOMB, {"error", "timeout", "killed"}),
        "memory": (MEMORY_BOMB, {"memory"}),
        "disk": (DISK_FILL, {"error"}),
        "flood": (FLOOD, {"output_limit"}),
        "sleep": (SLEEPER, {"timeout"}),
        "kill": ("import os, signal\nos.kill(-1, signal.SIGKILL)\nraise SystemExit(1)\n", None),
    }
    relaxed = SandboxLimits(wall_s=20, cpu_s=10, memory_mb=512)
    # Nine programs start at once on a small machine: give startup more wall time.
    bombs = SandboxLimits(**{**LIMITS.__dict__, "wall_s": 6})
    old = sandbox.max_concurrency()

    async def main():
        jobs = [arun_python(code, limits=bombs) for code, _ in attacks.values()]
        jobs += [arun_python(benign, limits=relaxed) for _ in range(2)]
        return await asyncio.gather(*jobs)

    try:
        sandbox.set_max_concurrency(len(attacks) + 2)
        results = asyncio.run(main())
    finally:
        sandbox.set_max_concurrency(old)
    for (name, (_, allowed)), r in zip(attacks.items(), results, strict=False):
        assert r.status != "ok", name
        assert r.reason, name
        if allowed is not None:
            assert r.status in allowed, (name, r)
    for r in results[len(attacks) :]:
        assert r.status == "ok", r
        assert r.stdout.strip() == expected
    assert _sandbox_uid_processes() == []
    assert _host_can_fork()
    assert signal.getsignal(signal.SIGINT) is not None


# ------------------------------------------------ grading cannot be forged (issue 44, section 2)
#
# The attacks run as the graded program, at import time, so each one works for every test kind.
# Before the program ran in its own process they all passed; now each is graded a failure.

FIX = REPO / "tests" / "fixtures" / "benchmarks"
FORGED = '{"passed": true, "reason": "forged"}'
FORGE_REPORT = f"""\
import gc, os, re, sys
def _hex_strings(values):
    return {{v for v in values if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{{32}}", v)}}
nonces = set()
frame = sys._getframe()
while frame is not None:  # the driver's frames: its nonce and its report descriptor
    nonces |= _hex_strings(frame.f_locals.values())
    frame = frame.f_back
for obj in gc.get_objects():  # anything else this interpreter holds
    if isinstance(obj, dict):
        nonces |= _hex_strings(list(obj.values()))
    elif isinstance(obj, (list, tuple)):
        nonces |= _hex_strings(obj)
for nonce in nonces:
    for fd in range(64):
        try:
            os.write(fd, ("\\n" + nonce + " " + {FORGED!r} + "\\n").encode())
        except OSError:
            pass
os._exit(0)
"""
FORGE_THROUGH_PROC = f"""\
import os, re
ppid = os.getppid()
try:  # the parent's memory holds the nonce: read it through /proc
    maps = open(f"/proc/{{ppid}}/maps").read().splitlines()
    mem = open(f"/proc/{{ppid}}/mem", "rb", buffering=0)
    found = set()
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if "rw" in line.split()[1]:
            try:
                mem.seek(lo)
                found |= set(re.findall(rb"[0-9a-f]{{32}}", mem.read(hi - lo)))
            except (OSError, OverflowError, ValueError):
                pass
    for name in os.listdir(f"/proc/{{ppid}}/fd"):  # and its report descriptor
        for nonce in found:
            with open(f"/proc/{{ppid}}/fd/{{name}}", "w") as fh:
                fh.write("\\n" + nonce.decode() + " " + {FORGED!r} + "\\n")
except OSError as exc:
    print("blocked:", exc)
os._exit(0)
"""
STEAL_EXPECTED = """\
import gc, glob, json, os, sys
def _harvest(tree, pairs, seen=None):
    '''Collect the {"input", "output"} dicts and "<name>.in"/"<name>.out" entries of a tree.'''
    seen = set() if seen is None else seen
    if id(tree) in seen:
        return
    seen.add(id(tree))
    if isinstance(tree, list):
        for item in tree:
            _harvest(item, pairs, seen)
    if not isinstance(tree, dict):
        return
    if isinstance(tree.get("input"), str) and isinstance(tree.get("output"), str):
        pairs[tree["input"]] = tree["output"]
    for key, value in list(tree.items()):
        if isinstance(key, str) and key.endswith(".in") and isinstance(value, str):
            out = tree.get(key[:-3] + ".out")
            if isinstance(out, str):
                pairs[value] = out
        if isinstance(value, (dict, list)):
            _harvest(value, pairs, seen)
def stolen():
    '''(input, expected output) pairs wherever this process can read them.'''
    pairs = {}
    for root in (".", "/sandbox", "/tmp"):
        for path in glob.glob(os.path.join(root, "**", "*.in"), recursive=True):
            try:
                pairs[open(path).read()] = open(path[:-3] + ".out").read()
            except OSError:
                pass
    texts, frame = [], sys._getframe()
    while frame is not None:  # the driver's frames
        texts += [v for v in frame.f_locals.values() if isinstance(v, str)]
        _harvest(list(frame.f_locals.values()), pairs)
        frame = frame.f_back
    for obj in gc.get_objects():  # every container of the interpreter, e.g. a request dict
        _harvest(obj, pairs)
        if isinstance(obj, dict):
            texts += [v for v in obj.values() if isinstance(v, str)]
        elif isinstance(obj, (list, tuple)):
            texts += [v for v in obj if isinstance(v, str)]
    for text in texts:  # the tests as JSON text, not yet parsed
        if '"output"' in text and "{" in text:
            try:
                _harvest(json.loads(text[text.index("{"):]), pairs)
            except ValueError:
                pass
    return pairs
"""
STEAL_STDIO = STEAL_EXPECTED + "print(stolen().get(sys.stdin.read(), 'nothing found'))\n"
STEAL_CALL = STEAL_EXPECTED + (
    "class Solution:\n"
    "    def twoSum(self, nums, target):\n"
    "        for raw, out in stolen().items():\n"
    "            try:\n"
    "                args = [json.loads(line) for line in raw.strip().split('\\n')]\n"
    "            except ValueError:\n"
    "                continue\n"
    "            if args == [nums, target]:\n"
    "                return json.loads(out)\n"
)
ALWAYS_EQUAL = {
    "object": "class Forged:\n    pass\n",
    "int": "class Forged(int):\n    pass\n",
    "float": "class Forged(float):\n    pass\n",
    "str": "class Forged(str):\n    pass\n",
    "list": "class Forged(list):\n    pass\n",
}
EQUAL_TO_ALL = (
    "    def __eq__(self, other):\n        return True\n"
    "    def __ne__(self, other):\n        return False\n"
    "    __hash__ = object.__hash__\n"
)


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def graded_problems() -> dict[str, object]:
    """One problem per test kind: HumanEval (functional), LiveCodeBench stdin/stdout and call."""
    from conductor_core.tasks.sources import load_benchmark

    humaneval = {p.id: p for p in load_benchmark("humaneval")}
    lcb = {
        p.id.split("/")[1]: p
        for p in load_benchmark("livecodebench", path=str(FIX / "livecodebench.jsonl"))
    }
    return {"functional": humaneval["HumanEval/0"], "stdio": lcb["abc300_a"], "call": lcb["1"]}


# Each kind's program defines what the tests look for, then attacks at import time.
ENTRY = {
    "functional": "def has_close_elements(numbers, threshold):\n    return True\n",
    "stdio": "",
    "call": "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n",
}


def _grade(problem: object, program: str):
    from conductor_core.tasks.grading import grade

    return grade(problem, _fenced(program), timeout_s=3)


@pytest.mark.parametrize("kind", ["functional", "stdio", "call"])
def test_walking_frames_to_the_nonce_cannot_forge_a_pass(graded_problems, kind):
    v = _grade(graded_problems[kind], ENTRY[kind] + FORGE_REPORT)
    assert not v.correct, v.reason
    assert "forged" not in v.reason


@needs_ns
@pytest.mark.parametrize("kind", ["functional", "call"])
def test_reading_the_drivers_memory_through_proc_cannot_forge_a_pass(graded_problems, kind):
    v = _grade(graded_problems[kind], ENTRY[kind] + FORGE_THROUGH_PROC)
    assert not v.correct, v.reason
    assert "forged" not in v.reason


@pytest.mark.parametrize(("kind", "program"), [("stdio", STEAL_STDIO), ("call", STEAL_CALL)])
def test_expected_outputs_are_out_of_the_programs_reach(graded_problems, kind, program):
    v = _grade(graded_problems[kind], program)
    assert not v.correct, v.reason
    assert "wrong answer" in v.reason


@pytest.mark.parametrize("base", sorted(ALWAYS_EQUAL))
@pytest.mark.parametrize("kind", ["functional", "call"])
def test_a_result_equal_to_everything_does_not_pass(graded_problems, kind, base):
    forged = ALWAYS_EQUAL[base] + EQUAL_TO_ALL
    name = {
        "functional": "has_close_elements(numbers, threshold)",
        "call": "twoSum(self, nums, target)",
    }[kind]
    body = f"def {name}:\n    return Forged()\n"
    if kind == "call":
        body = "class Solution:\n    " + body.replace("\n", "\n    ")
    v = _grade(graded_problems[kind], forged + body)
    assert not v.correct, v.reason
