"""Gateway load benchmark: throughput, latency and the gateway's own overhead, with and without
injected worker failures.

    python bench/bench_gateway_load.py [--requests 2000] [--concurrency 64] [--fail-rate 0.05]
        [--latency-ms 50] [--timeout 30] [--only clean|faults]
        [--stream-requests 200] [--stream-concurrency 1]

Three processes on loopback, as in production: the worker simulator (``conductor simulate
serve``) serving the bundled pool's simulated workers, the gateway (``conductor serve``, JSON
access log on, scripted plan source) whose pool lists the same workers as OpenAI-compatible
endpoints pointing at the simulator, and this client: ``--concurrency`` asyncio clients (one
``httpx.AsyncClient``) sending ``--requests`` chat completions in all, the bundled demo
questions in turn, each with its own ``seed``.

For every answered request, overhead = client-observed latency - the workflow's own wall time
(``conductor.wall_s`` of the response: plan + every worker call, measured inside ``solve()``), so
it is what the gateway adds: HTTP, parsing, validation, response encoding, middleware, logging
and metrics, plus any queueing in front of them. Targets: overhead p50 < 5 ms, p99 < 25 ms.

The run is repeated with ``--fail-rate`` of the simulated worker calls failing (half HTTP 500,
half HTTP 429 with Retry-After); the pool retries them. Every request must end as a 200 or an
OpenAI-format error (``{"error": {...}}``) within ``--timeout``: timeouts, transport errors and
5xx without an OpenAI error body are counted and reported as unexplained.

Streaming: after each run's load, ``--stream-requests`` streamed completions (``stream: true``,
``--stream-concurrency`` clients) measure the time to the first answer token (the first
``delta.content`` chunk: the last step's worker streams its reply through the gateway) against
the time to the full answer (``[DONE]``), and the answer's pieces per request. The worker
simulator streams each answer in up to 16 pieces spread over its ``--latency-ms``.

CPU per request: the gateway's (and the simulator's) process CPU time, user + system from
``/proc``, over the measured load and its warm-up, divided by those requests; on a machine with
few cores and other work this is steadier than latency, which includes waiting for a core.
Target: at most 5 ms of gateway CPU per request.

Prints figures (with the machine's core count); it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from conductor_core.workers.bundled import bundled_pool_path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "conductor_core" / "resources" / "problems" / "demo.jsonl"
CONDUCTOR = str(Path(sys.executable).with_name("conductor"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def questions() -> list[str]:
    rows = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines() if line]
    return [r["question"] for r in rows if r.get("question")]


def write_pools(
    folder: Path, sim_url: str, fail_rate: float, latency_ms: float
) -> tuple[Path, Path]:
    """(simulator pool, gateway pool): the bundled workers with the given latency and failure
    rates, and the same workers as ``openai`` endpoints at ``sim_url``."""
    bundled = yaml.safe_load(bundled_pool_path().read_text(encoding="utf-8"))
    sim_workers, gw_workers = [], []
    for w in bundled["workers"]:
        sim = dict(w)
        sim["simulation"] = {
            **w["simulation"],
            "latency_ms": latency_ms,
            "failures": {"server_error": fail_rate / 2, "rate_limit": fail_rate / 2},
        }
        sim_workers.append(sim)
        gw = {k: v for k, v in w.items() if k not in ("provider", "simulation")}
        gw.update(provider="openai", endpoint=sim_url, concurrency=64, max_retries=6)
        gw_workers.append(gw)
    problems = str(bundled_pool_path().parent)
    for sim in sim_workers:  # 'bundled' is a special name; keep it, paths resolve elsewhere
        sim["simulation"]["problems"] = [
            p if p.startswith("bundled") else str(Path(problems) / p)
            for p in sim["simulation"]["problems"]
        ]
    sim_pool = folder / "sim-pool.yaml"
    gw_pool = folder / "gateway-pool.yaml"
    sim_pool.write_text(yaml.safe_dump({"workers": sim_workers}), encoding="utf-8")
    retry = {"backoff_base_s": 0.02, "backoff_max_s": 0.5, "circuit_failure_threshold": 5}
    gw_pool.write_text(yaml.safe_dump({"workers": gw_workers, "retry": retry}), encoding="utf-8")
    return sim_pool, gw_pool


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    handle = log.open("wb")
    return subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not ready after {timeout_s:g}s:\n{log.read_text()[-3000:]}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # graceful in uvicorn, and lets cProfile write its stats
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)  # answered requests, seconds
    overheads: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    error_codes: Counter = field(default_factory=Counter)
    timeouts: int = 0
    transport_errors: int = 0
    unexplained: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    retries: int = 0


async def load(url: str, n: int, concurrency: int, timeout_s: float, qs: list[str]) -> Results:
    """Send ``n`` requests from ``concurrency`` concurrent clients (after a short warm-up)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client_loop(client: httpx.AsyncClient, todo, res: Results) -> None:
        for i in todo:
            body = {
                "model": "conductor",
                "messages": [{"role": "user", "content": qs[i % len(qs)]}],
                "seed": i,
            }
            t0 = time.perf_counter()
            try:
                r = await client.post("/chat/completions", json=body)
            except httpx.TimeoutException:
                res.timeouts += 1
                continue
            except httpx.HTTPError as exc:
                res.transport_errors += 1
                res.unexplained.append(f"request {i}: {type(exc).__name__}: {exc}")
                continue
            elapsed = time.perf_counter() - t0
            res.statuses[r.status_code] += 1
            try:
                data = r.json()
            except ValueError:
                res.unexplained.append(f"request {i}: HTTP {r.status_code}, body not JSON")
                continue
            if r.status_code == 200:
                res.latencies.append(elapsed)
                res.overheads.append(elapsed - data["conductor"]["wall_s"])
                continue
            error = data.get("error") if isinstance(data, dict) else None
            if not isinstance(error, dict) or not error.get("message") or not error.get("type"):
                res.unexplained.append(f"request {i}: HTTP {r.status_code} without an error object")
                continue
            res.error_codes[f"{r.status_code} {error.get('code')}"] += 1
            if r.status_code >= 500 and error.get("code") not in (
                "worker_error",
                "request_timeout",
            ):
                res.unexplained.append(f"request {i}: HTTP {r.status_code}: {error['message']}")

    async def phase(client: httpx.AsyncClient, ids: range, clients: int) -> Results:
        res = Results()
        todo = iter(ids)
        t0 = time.perf_counter()
        await asyncio.gather(*(client_loop(client, todo, res) for _ in range(clients)))
        res.wall_s = time.perf_counter() - t0
        return res

    async with httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(timeout_s), limits=limits
    ) as client:
        await phase(client, range(n, n + 2 * concurrency), concurrency)  # warm-up: connections
        return await phase(client, range(n), concurrency)


@dataclass
class StreamResults:
    first_token: list[float] = field(default_factory=list)  # seconds to the first answer piece
    full: list[float] = field(default_factory=list)  # seconds to [DONE]
    pieces: list[int] = field(default_factory=list)  # content chunks per answer
    errors: Counter = field(default_factory=Counter)


async def stream_load(
    url: str, n: int, concurrency: int, timeout_s: float, qs: list[str]
) -> StreamResults:
    """Send ``n`` streamed requests from ``concurrency`` clients (after a short warm-up); time
    the first answer piece and the end of each stream."""

    async def one(client: httpx.AsyncClient, i: int, res: StreamResults) -> None:
        body = {
            "model": "conductor",
            "messages": [{"role": "user", "content": qs[i % len(qs)]}],
            "seed": i,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        t0 = time.perf_counter()
        first, pieces = None, 0
        try:
            async with client.stream("POST", "/chat/completions", json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    res.errors[f"HTTP {r.status_code}"] += 1
                    return
                async for line in r.aiter_lines():
                    if line == "data: [DONE]":
                        break
                    if line.startswith('data: {"error"'):
                        res.errors[json.loads(line[6:])["error"].get("code")] += 1
                        return
                    if '"content":' not in line:  # workflow events, role and usage chunks
                        continue
                    choices = json.loads(line[6:])["choices"]
                    if choices and choices[0]["delta"].get("content"):
                        pieces += 1
                        if first is None:
                            first = time.perf_counter() - t0
        except httpx.HTTPError as exc:
            res.errors[type(exc).__name__] += 1
            return
        if first is None:
            res.errors["no answer piece"] += 1
            return
        res.first_token.append(first)
        res.full.append(time.perf_counter() - t0)
        res.pieces.append(pieces)

    async def phase(client: httpx.AsyncClient, ids: range) -> StreamResults:
        res, todo = StreamResults(), iter(ids)

        async def loop() -> None:
            for i in todo:
                await one(client, i, res)

        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return res

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(timeout_s), limits=limits
    ) as client:
        await phase(client, range(n, n + 2 * concurrency))  # warm-up
        return await phase(client, range(n))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def metric(text: str, name: str) -> float:
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def run(label: str, args: argparse.Namespace, fail_rate: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        folder = Path(tmp)
        sim_port, gw_port = free_port(), free_port()
        sim_url = f"http://127.0.0.1:{sim_port}/v1"
        gw_url = f"http://127.0.0.1:{gw_port}/v1"
        sim_pool, gw_pool = write_pools(folder, sim_url, fail_rate, args.latency_ms)
        sim_log, gw_log = folder / "simulator.log", folder / "gateway.log"
        sim = start(
            [CONDUCTOR, "simulate", "serve", "--pool", str(sim_pool), "--port", str(sim_port)],
            sim_log,
        )
        gateway = None
        try:
            wait_ready(f"http://127.0.0.1:{sim_port}/health", sim, sim_log)
            profile = ["-m", "cProfile", "-o", str(args.profile)] if args.profile else []
            serve = ["serve", "--pool", str(gw_pool), "--port", str(gw_port)]
            serve += ["--log-level", args.log_level]
            gateway = start([sys.executable, *profile, CONDUCTOR, *serve], gw_log)
            wait_ready(f"http://127.0.0.1:{gw_port}/readyz", gateway, gw_log)
            cpu0 = cpu_seconds(gateway.pid), cpu_seconds(sim.pid)
            res = asyncio.run(load(gw_url, args.requests, args.concurrency, args.timeout, QS))
            cpu = cpu_seconds(gateway.pid) - cpu0[0], cpu_seconds(sim.pid) - cpu0[1]
            metrics_text = httpx.get(f"http://127.0.0.1:{gw_port}/metrics", timeout=10).text
            streams = StreamResults()
            if args.stream_requests:
                streams = asyncio.run(
                    stream_load(
                        gw_url, args.stream_requests, args.stream_concurrency, args.timeout, QS
                    )
                )
        finally:
            if gateway is not None:
                stop(gateway)
            stop(sim)
        log_lines = gw_log.read_text(errors="replace").splitlines()
        access_lines = sum(1 for line in log_lines if '"route"' in line)
        problems = [line for line in log_lines if '"level": "ERROR"' in line]
        problems += [line for line in log_lines if '"level": "WARNING"' in line]
    done = sum(res.statuses.values())
    retries = metric(metrics_text, "conductor_gateway_worker_retries_total")
    calls = metric(metrics_text, "conductor_gateway_worker_calls_total")
    ms = [x * 1000 for x in res.latencies]
    ov = [x * 1000 for x in res.overheads]
    out = {
        "run": label,
        "fail_rate": fail_rate,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "completed": done,
        "ok": res.statuses.get(200, 0),
        "throughput_rps": round(done / res.wall_s, 1) if res.wall_s else 0.0,
        "latency_ms_p50": round(pct(ms, 50), 2),
        "latency_ms_p99": round(pct(ms, 99), 2),
        "overhead_ms_p50": round(pct(ov, 50), 2),
        "overhead_ms_p99": round(pct(ov, 99), 2),
        "overhead_ms_mean": round(statistics.fmean(ov), 2) if ov else None,
        "errors": dict(res.error_codes),
        "timeouts": res.timeouts,
        "transport_errors": res.transport_errors,
        "unexplained": len(res.unexplained),
        "worker_calls": int(calls),
        "worker_retries": int(retries),
        "access_log_lines": access_lines,
        "cpu_count": os.cpu_count(),
        "gateway_cpu_ms_per_request": round(cpu[0] * 1000 / max(1, done + 2 * args.concurrency), 2),
        "simulator_cpu_ms_per_request": round(
            cpu[1] * 1000 / max(1, done + 2 * args.concurrency), 2
        ),
        "stream_requests": args.stream_requests,
        "stream_concurrency": args.stream_concurrency,
        "stream_answered": len(streams.full),
        "first_token_ms_p50": round(pct([x * 1000 for x in streams.first_token], 50), 2),
        "first_token_ms_p99": round(pct([x * 1000 for x in streams.first_token], 99), 2),
        "full_answer_ms_p50": round(pct([x * 1000 for x in streams.full], 50), 2),
        "full_answer_ms_p99": round(pct([x * 1000 for x in streams.full], 99), 2),
        "answer_pieces_mean": round(statistics.fmean(streams.pieces), 1) if streams.pieces else 0,
        "stream_errors": dict(streams.errors),
    }
    print(
        f"\n== {label}: {args.requests} requests, {args.concurrency} clients, "
        f"worker latency {args.latency_ms:g} ms, worker failure rate {fail_rate:.0%}, "
        f"{os.cpu_count()} cores"
    )
    print(
        f"throughput       {out['throughput_rps']:8.1f} req/s   ({done} done in {res.wall_s:.1f} s)"
    )
    lat = f"p50 {out['latency_ms_p50']:8.2f} ms   p99 {out['latency_ms_p99']:8.2f} ms"
    print(f"latency          {lat}")
    over = f"p50 {out['overhead_ms_p50']:8.2f} ms   p99 {out['overhead_ms_p99']:8.2f} ms"
    met = out["overhead_ms_p50"] < 5 and out["overhead_ms_p99"] < 25
    print(f"gateway overhead {over}   (targets p50 < 5, p99 < 25 ms: {'met' if met else 'MISSED'})")
    cpu_met = out["gateway_cpu_ms_per_request"] <= 5
    print(
        f"CPU per request  gateway {out['gateway_cpu_ms_per_request']:.2f} ms, "
        f"simulator {out['simulator_cpu_ms_per_request']:.2f} ms   "
        f"(target gateway <= 5 ms: {'met' if cpu_met else 'MISSED'})"
    )
    print(
        f"answered {out['ok']}, errors {out['errors'] or 'none'}, timeouts {res.timeouts}, "
        f"transport errors {res.transport_errors}, unexplained {len(res.unexplained)}"
    )
    print(
        f"worker calls {out['worker_calls']}, retries {out['worker_retries']}, "
        f"access-log lines {access_lines}"
    )
    if args.stream_requests:
        print(
            f"streamed         {len(streams.full)}/{args.stream_requests} answered "
            f"({args.stream_concurrency} clients), errors {dict(streams.errors) or 'none'}"
        )
        first = f"p50 {out['first_token_ms_p50']:8.2f} ms   p99 {out['first_token_ms_p99']:8.2f} ms"
        print(f"first answer tok {first}")
        full = f"p50 {out['full_answer_ms_p50']:8.2f} ms   p99 {out['full_answer_ms_p99']:8.2f} ms"
        print(f"full answer      {full}   ({out['answer_pieces_mean']} pieces per answer)")
    for line in res.unexplained[:10]:
        print("  unexplained:", line)
    print(f"gateway log: {len(problems)} warning/error lines")
    for line in problems[:5]:
        print("  ", line[:300])
    return out


QS: list[str] = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--fail-rate", type=float, default=0.05)
    parser.add_argument("--latency-ms", type=float, default=50.0, help="simulated worker latency")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-request client timeout")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    parser.add_argument("--only", choices=["clean", "faults"], default=None)
    parser.add_argument(
        "--stream-requests", type=int, default=200, help="streamed requests per run (0: none)"
    )
    parser.add_argument("--stream-concurrency", type=int, default=1, help="streaming clients")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--profile", type=Path, default=None, help="run the gateway under cProfile, stats here"
    )
    args = parser.parse_args(argv)
    QS.extend(questions())
    results = []
    if args.only in (None, "clean"):
        results.append(run("no failures", args, 0.0))
    if args.only in (None, "faults"):
        results.append(run("injected failures", args, args.fail_rate))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0 if all(r["unexplained"] == 0 and r["timeouts"] == 0 for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
