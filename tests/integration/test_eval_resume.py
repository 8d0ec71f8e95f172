"""Kill a shard half-way and restart it: the final records equal an uninterrupted run's, with no
duplicate or missing problem."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conductor_core.evaluate.records import read_records
from conductor_core.tasks.problem import Problem, write_jsonl

N = 40


def setup_files(tmp: Path) -> tuple[Path, Path]:
    problems = [
        Problem(
            id=f"r{i:02d}",
            source="resume",
            domain="math",
            question=f"Resume problem {i}: what is {i} * 3?",
            reference=str(3 * i),
        )
        for i in range(N)
    ]
    write_jsonl(problems, tmp / "problems.jsonl")
    pool = {
        "workers": [
            {
                "name": "slow",
                "provider": "simulated",
                "model": "slow",
                "concurrency": 4,
                "simulation": {"skills": {"math": 0.6}, "latency_ms": 100, "seed": 5},
            }
        ]
    }
    (tmp / "pool.yaml").write_text(yaml.safe_dump(pool))
    return tmp / "problems.jsonl", tmp / "pool.yaml"


def command(problems: Path, pool: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "conductor_core",
        "eval",
        "run",
        "--benchmark",
        str(problems),
        "--pool",
        str(pool),
        "--no-conductor",
        "--baselines",
        "single:0,reflect:0:1",
        "--concurrency",
        "4",
        "--repeats",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]


def comparable(path: Path) -> dict:
    out = {}
    for r in read_records(path):
        assert r.key not in out, f"duplicate record {r.key}"
        out[r.key] = r.model_dump(exclude={"wall_s", "trace"})
    return out


def test_killed_shard_resumes_to_the_same_records(tmp_path) -> None:
    problems, pool = setup_files(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    full = tmp_path / "full"
    subprocess.run(
        command(problems, pool, full), check=True, env=env, capture_output=True, timeout=300
    )

    part = tmp_path / "part"
    proc = subprocess.Popen(
        command(problems, pool, part),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    records = part / "records-0of1.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        if records.exists() and records.read_text().count("\n") >= 20:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(read_records(records))
    assert 0 < done_before < 4 * N, done_before

    subprocess.run(
        command(problems, pool, part), check=True, env=env, capture_output=True, timeout=300
    )
    expected, resumed = comparable(full / "records-0of1.jsonl"), comparable(records)
    assert len(expected) == 4 * N  # 2 methods x N problems x 2 repeats
    assert resumed == expected
