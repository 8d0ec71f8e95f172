"""Limits and results of one sandboxed run (the data contract shared by every backend)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed", "sandbox_error")


@dataclass
class SandboxLimits:
    """Resource limits of one run.

    ``cpu_s`` CPU seconds (RLIMIT_CPU), ``wall_s`` wall-clock seconds (the whole process tree is
    killed), ``memory_mb`` address space (RLIMIT_AS), ``max_processes`` tasks of the run
    (RLIMIT_NPROC for the run's own uid or user namespace), ``file_size_mb`` largest file
    (RLIMIT_FSIZE; the private tmpfs workdir and /tmp are each capped at 4x this), ``open_files``
    (RLIMIT_NOFILE) and ``output_bytes`` (stdout + stderr together; beyond it the run is killed).
    """

    cpu_s: float = 10
    wall_s: float = 10
    memory_mb: int = 1024
    max_processes: int = 64
    file_size_mb: int = 16
    open_files: int = 256
    output_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(
                    f"SandboxLimits.{f.name} must be a positive number, got {value!r}; "
                    f"pass e.g. SandboxLimits({f.name}={f.default})"
                )
        if self.open_files < 16:
            raise ValueError(
                f"SandboxLimits.open_files must be at least 16 (Python needs a few), "
                f"got {self.open_files}"
            )

    @property
    def tmpfs_mb(self) -> int:
        """Size cap of each private tmpfs (workdir and /tmp) in MiB."""
        return max(8, 4 * int(self.file_size_mb))


@dataclass
class SandboxResult:
    """What happened to one run.

    ``status`` is one of ``ok`` (exit 0), ``error`` (non-zero exit, e.g. a failed assert),
    ``timeout`` (wall-clock or CPU limit), ``memory`` (MemoryError / allocation failure),
    ``output_limit`` (output cap reached, run killed), ``killed`` (killed by a signal) or
    ``sandbox_error`` (the sandbox itself failed: an infrastructure failure, not the program's
    fault). ``returncode`` is negative for a signal (``-9`` = SIGKILL) and ``None`` when the
    program never ran. ``reason`` is one human-readable line. ``isolation`` names the
    mechanisms that were in force (e.g. ``("bwrap", "net-ns", "pid-ns", ...)``).
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    reason: str
    isolation: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 inside its limits."""
        return self.status == "ok"

    @property
    def infra_error(self) -> bool:
        """True when the failure is the sandbox's, not the program's (exclude from rewards)."""
        return self.status == "sandbox_error"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (isolation as a list)."""
        data = asdict(self)
        data["isolation"] = list(self.isolation)
        return data
