"""Baseline specifications as written on the command line (``--baselines single,moa,sc:0:5``)."""

from __future__ import annotations

import os
from pathlib import Path

from conductor_core.errors import ConductorError, ConfigError
from conductor_core.evaluate.methods import (
    Method,
    PlanSourceMethod,
    RandomPlanSource,
    SelfConsistencyMethod,
    mixture_of_agents,
    self_reflection,
    single_worker,
)
from conductor_core.solve import SolveOptions
from conductor_core.workers.config import PoolConfig

BASELINE_HELP = """\
single            each worker alone (one method per worker)
single:W          worker W alone
moa[:L[:A]]       mixture-of-agents: every worker proposes (L layers, default 1), worker A
                  aggregates (default: the last worker)
sc:W[:N]          self-consistency: N samples of worker W (default 5), majority vote
reflect:W[:N]     self-reflection: worker W answers, then revises N times (default 4)
random[:SEED]     random plans with the Conductor's plan-length distribution (sanity floor)
frontier:W        pool worker W (an openai-provider worker) used as an untrained conductor
smoothie          Smoothie (label-free): every worker answers, the answer whose embedding agrees
                  most with the others (triplet estimate) is kept
routerdc[:PATH]   RouterDC: a trained query router (fit_routerdc) sends the question to one worker
masrouter[:PATH]  MASRouter: a trained controller (fit_masrouter) picks a collaboration mode, roles
                  and workers
Routers embed text with the sentence encoder given as `encoder` (default all-MiniLM-L6-v2, or
$CONDUCTOR_ROUTER_ENCODER); a router folder defaults to $CONDUCTOR_ROUTER_DIR/<kind>."""

ROUTER_DIR_ENV = "CONDUCTOR_ROUTER_DIR"
"""Folder holding trained routers as ``routerdc/`` and ``masrouter/`` (when no PATH is given)."""


def _ints(parts: list[str], spec: str) -> list[int]:
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ConductorError(f"baseline '{spec}': expected integers after ':'") from None


def _check_worker(w: int, pool: PoolConfig, spec: str) -> int:
    if not 0 <= w < len(pool):
        raise ConductorError(
            f"baseline '{spec}': worker {w} is not in the pool (0..{len(pool) - 1})"
        )
    return w


def build_baselines(
    specs: list[str],
    pool: PoolConfig,
    *,
    options: SolveOptions | None = None,
    plan_lengths: dict[int, float] | None = None,
    encoder: str | None = None,
    router_dirs: dict[str, str | Path] | None = None,
) -> list[Method]:
    """Methods for the given baseline specs (see :data:`BASELINE_HELP`).

    ``encoder`` is the routers' sentence encoder (a model folder or name; default
    all-MiniLM-L6-v2); ``router_dirs`` maps ``routerdc``/``masrouter`` to trained router folders
    for specs without a PATH.
    """
    opts = options or SolveOptions(answer_fallback=True)
    single_opts = SolveOptions(answer_fallback=True, budget=opts.budget)
    methods: list[Method] = []
    for spec in (s.strip() for s in specs if s.strip()):
        kind, _, arg = spec.partition(":")
        if kind in ("smoothie", "routerdc", "masrouter"):
            methods.append(_router(kind, arg, spec, pool, opts, encoder, router_dirs))
            continue
        args = _ints(spec.split(":")[1:], spec)
        if kind == "single":
            ids = [_check_worker(args[0], pool, spec)] if args else range(len(pool))
            for w in ids:
                name = f"single:{pool.workers[w].display_name}"
                methods.append(
                    PlanSourceMethod(name, single_worker(w), single_opts, bare_question=True)
                )
        elif kind == "moa":
            layers = args[0] if args else 1
            agg = _check_worker(args[1] if len(args) > 1 else len(pool) - 1, pool, spec)
            src = mixture_of_agents(list(range(len(pool))), agg, layers)
            methods.append(
                PlanSourceMethod(
                    f"moa:{layers}",
                    src,
                    SolveOptions(max_steps=64, answer_fallback=True, budget=opts.budget),
                )
            )
        elif kind == "sc":
            if not args:
                raise ConductorError(f"baseline '{spec}': give the worker, e.g. sc:0:5")
            w = _check_worker(args[0], pool, spec)
            n = args[1] if len(args) > 1 else 5
            methods.append(
                SelfConsistencyMethod(w, n, name=f"sc:{pool.workers[w].display_name}x{n}")
            )
        elif kind == "reflect":
            if not args:
                raise ConductorError(f"baseline '{spec}': give the worker, e.g. reflect:0:4")
            w = _check_worker(args[0], pool, spec)
            n = args[1] if len(args) > 1 else 4
            methods.append(
                PlanSourceMethod(
                    f"reflect:{pool.workers[w].display_name}x{n}",
                    self_reflection(w, n),
                    SolveOptions(max_steps=n + 1, answer_fallback=True, budget=opts.budget),
                )
            )
        elif kind == "random":
            seed = args[0] if args else 0
            methods.append(PlanSourceMethod("random", RandomPlanSource(plan_lengths, seed), opts))
        elif kind == "frontier":
            if not args:
                raise ConductorError(f"baseline '{spec}': give the worker, e.g. frontier:0")
            methods.append(_frontier(pool, _check_worker(args[0], pool, spec), spec, opts))
        else:
            raise ConductorError(f"unknown baseline '{spec}'. Known forms:\n{BASELINE_HELP}")
    return methods


def _frontier(pool: PoolConfig, w: int, spec: str, opts: SolveOptions) -> Method:
    from conductor_core.policy.openai_policy import OpenAIPlanSource

    worker = pool.workers[w]
    if worker.provider != "openai" or not worker.endpoint:
        raise ConductorError(
            f"baseline '{spec}': worker {w} ({worker.display_name}) must use the openai provider "
            "(an OpenAI-compatible endpoint) to act as an untrained conductor"
        )
    source = OpenAIPlanSource(
        worker.endpoint,
        worker.model,
        api_key_env=worker.api_key_env,
        temperature=worker.params.temperature,
    )
    return PlanSourceMethod(f"frontier-conductor:{worker.display_name}", source, opts)


def _router_dir(kind: str, arg: str, spec: str, router_dirs: dict[str, str | Path] | None) -> Path:
    if arg:
        return Path(arg)
    if router_dirs and kind in router_dirs:
        return Path(router_dirs[kind])
    root = os.environ.get(ROUTER_DIR_ENV)
    if root:
        return Path(root) / kind
    raise ConductorError(
        f"baseline '{spec}': give the trained router's folder ({kind}:PATH) or set "
        f"${ROUTER_DIR_ENV}; train one with fit_{kind} on records of the 'single' baseline"
    )


def _router(
    kind: str,
    arg: str,
    spec: str,
    pool: PoolConfig,
    opts: SolveOptions,
    encoder: str | None,
    router_dirs: dict[str, str | Path] | None,
) -> Method:
    """A router baseline (Smoothie, RouterDC or MASRouter); imports torch only when built."""
    from conductor_core.evaluate.routers.base import RoutedPlanSource

    if kind == "smoothie":
        if arg:
            raise ConductorError(f"baseline '{spec}': smoothie takes no argument")
        from conductor_core.evaluate.routers.smoothie import SmoothieMethod

        return SmoothieMethod(
            range(len(pool)),
            encoder,
            options=SolveOptions(answer_fallback=True, budget=opts.budget),
        )
    path = _router_dir(kind, arg, spec, router_dirs)
    try:
        if kind == "routerdc":
            from conductor_core.evaluate.routers.routerdc import RouterDC

            router = RouterDC(path, encoder)
        else:
            from conductor_core.evaluate.routers.masrouter import MASRouter

            router = MASRouter(path, encoder)
    except (ConfigError, ValueError) as exc:
        raise ConductorError(f"baseline '{spec}': {exc}") from exc
    if len(router.worker_methods) != len(pool):
        raise ConductorError(
            f"baseline '{spec}': the router was trained for {len(router.worker_methods)} workers "
            f"({', '.join(router.worker_methods)}), the pool has {len(pool)}"
        )
    name = f"{kind}[{router.encoder.name}]"
    if kind == "routerdc":
        from conductor_core.evaluate.methods import SOLVE
        from conductor_core.workflow.model import Step, Workflow

        def choose(question: str) -> Workflow:
            return Workflow(steps=(Step(worker=router.route(question), subtask=SOLVE),))

        return PlanSourceMethod(
            name,
            RoutedPlanSource(f"routerdc {path.name}", choose),
            SolveOptions(max_steps=1, answer_fallback=True, budget=opts.budget),
            bare_question=True,
        )
    return PlanSourceMethod(
        name,
        RoutedPlanSource(f"masrouter {path.name}", router.plan),
        SolveOptions(max_steps=3, answer_fallback=True, budget=opts.budget),
    )
