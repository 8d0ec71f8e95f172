"""What every local isolation mode shares once a run is over, and the environment a run gets.

Used by the one-process-per-run modes (``local.py``) and by the ``zygote`` mode (``zygote.py``):
the scrubbed environment, the raw outcome of a run (output, start marker, kills) and how an
outcome becomes a status and a reason.
"""

from __future__ import annotations

import signal

from conductor_core.tasks.sandbox.types import SandboxLimits


def scrubbed_env(workdir: str) -> dict[str, str]:
    """The whole environment of a run: a fixed allow-list, never anything inherited."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


class RunOutcome:
    """The raw outcome of one run: its output, whether the program started (``marker``), and
    whether the host killed it for the wall clock (``timed_out``) or the output cap."""

    __slots__ = ("marker", "out_killed", "stderr", "stdout", "timed_out")

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.marker = False
        self.timed_out = False
        self.out_killed = False


def signal_of(returncode: int, mode: str) -> int | None:
    """The signal that ended the program, if any (bwrap reports 128+N for a signal)."""
    if returncode < 0:
        return -returncode
    if mode == "bwrap" and 128 < returncode < 128 + 65:
        return returncode - 128
    return None


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped and cut to 300 characters."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def classify(
    out: RunOutcome, returncode: int | None, limits: SandboxLimits, mode: str
) -> tuple[str, str]:
    """The status (one of :data:`~conductor_core.tasks.sandbox.types.STATUSES`) and the reason
    of a finished run in isolation ``mode``."""
    stderr = out.stderr.decode("utf-8", "replace")
    if out.out_killed:
        return "output_limit", f"output exceeded {limits.output_bytes} bytes; run killed"
    if not out.marker:
        if out.timed_out:
            return "sandbox_error", f"sandbox did not start within {limits.wall_s:g} s"
        detail = last_line(stderr) or f"exit code {returncode}"
        return "sandbox_error", f"sandbox failed to start the program ({mode}): {detail}"
    if out.timed_out:
        return "timeout", f"wall-clock limit of {limits.wall_s:g} s exceeded; process tree killed"
    if returncode == 0:
        return "ok", "exit code 0"
    last = last_line(stderr)
    if "MemoryError" in last or "Cannot allocate memory" in last or "bad_alloc" in last:
        return "memory", f"memory limit of {limits.memory_mb} MiB exceeded: {last}"
    sig = signal_of(returncode or 0, mode)
    if sig == signal.SIGXCPU:
        return "timeout", f"CPU time limit of {limits.cpu_s:g} s exceeded (SIGXCPU)"
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return "killed", f"killed by signal {name}" + (f": {last}" if last else "")
    return "error", last or f"exit code {returncode}"


__all__ = ["RunOutcome", "classify", "last_line", "scrubbed_env", "signal_of"]
