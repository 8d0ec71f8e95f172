"""Baseline specifications as written on the command line (``--baselines single,moa,sc:0:5``).

:data:`BASELINES` is the one registry of the baselines: each kind's spellings, what they mean and
the function that builds its methods. :func:`build_baselines` dispatches through it, and the help
texts (:func:`baseline_help`, :func:`baseline_forms`, so ``conductor eval run --help``) are made
from it, so a new baseline is accepted and documented in one place. The methods' modules are
imported only when a baseline is built (the command line's help stays fast).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from conductor_core.errors import ConductorError, ConfigError
from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.solve import SolveOptions
from conductor_core.workflow.model import Step, Workflow

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.evaluate.methods import Method
    from conductor_core.workers.config import PoolConfig

ROUTER_DIR_ENV = "CONDUCTOR_ROUTER_DIR"
"""Folder holding trained routers as ``routerdc/`` and ``masrouter/`` (when no DIR is given)."""


@dataclass(frozen=True)
class _Build:
    """What every builder gets besides the spec: the pool and the shared settings."""

    pool: PoolConfig
    options: SolveOptions
    plan_lengths: dict[int, float] | None
    encoder: str | None
    router_dirs: dict[str, str | Path] | None

    def bounded(self, max_steps: int = 5) -> SolveOptions:
        """Solve options of a baseline with its own plan length: the shared budget only."""
        return SolveOptions(max_steps=max_steps, answer_fallback=True, budget=self.options.budget)


Builder = Callable[[str, str, _Build], "list[Method]"]
"""``build(spec, argument after the first ':', settings)`` -> the spec's methods."""


@dataclass(frozen=True)
class Baseline:
    """One kind of baseline in :data:`BASELINES`."""

    forms: tuple[tuple[str, str], ...]
    """``(spelling, meaning)`` of each way to write it, e.g. ``("single:W", "worker W alone")``."""
    build: Builder


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


def _worker_arg(spec: str, arg: str, ctx: _Build, example: str) -> tuple[int, list[int]]:
    """The worker (checked) and the further integers of ``KIND:W[:...]``."""
    args = _ints(arg.split(":"), spec) if arg else []
    if not args:
        raise ConductorError(f"baseline '{spec}': give the worker, e.g. {example}")
    return _check_worker(args[0], ctx.pool, spec), args[1:]


def _single(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import PlanSourceMethod, single_worker

    args = _ints(arg.split(":"), spec) if arg else []
    ids = [_check_worker(args[0], ctx.pool, spec)] if args else range(len(ctx.pool))
    # A single worker keeps the default plan length: its one step needs no more.
    opts = SolveOptions(answer_fallback=True, budget=ctx.options.budget)
    return [
        PlanSourceMethod(
            f"single:{ctx.pool.workers[w].display_name}", single_worker(w), opts, bare_question=True
        )
        for w in ids
    ]


def _moa(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import PlanSourceMethod, mixture_of_agents

    args = _ints(arg.split(":"), spec) if arg else []
    layers = args[0] if args else 1
    agg = _check_worker(args[1] if len(args) > 1 else ctx.pool.aggregator_id(), ctx.pool, spec)
    source = mixture_of_agents(list(range(len(ctx.pool))), agg, layers)
    return [PlanSourceMethod(f"moa:{layers}", source, ctx.bounded(64))]


def _sc(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import SelfConsistencyMethod

    w, rest = _worker_arg(spec, arg, ctx, "sc:0:5")
    n = rest[0] if rest else 5
    return [SelfConsistencyMethod(w, n, name=f"sc:{ctx.pool.workers[w].display_name}x{n}")]


def _reflect(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import PlanSourceMethod, self_reflection

    w, rest = _worker_arg(spec, arg, ctx, "reflect:0:4")
    n = rest[0] if rest else 4
    name = f"reflect:{ctx.pool.workers[w].display_name}x{n}"
    return [PlanSourceMethod(name, self_reflection(w, n), ctx.bounded(n + 1))]


def _random(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import PlanSourceMethod, RandomPlanSource

    args = _ints(arg.split(":"), spec) if arg else []
    seed = args[0] if args else 0
    return [PlanSourceMethod("random", RandomPlanSource(ctx.plan_lengths, seed), ctx.options)]


def _frontier(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import PlanSourceMethod

    w, _ = _worker_arg(spec, arg, ctx, "frontier:0")
    worker = ctx.pool.workers[w]
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
    return [PlanSourceMethod(f"frontier-conductor:{worker.display_name}", source, ctx.options)]


def _smoothie(spec: str, arg: str, ctx: _Build) -> list[Method]:
    if arg:
        raise ConductorError(f"baseline '{spec}': smoothie takes no argument")
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.routers.smoothie import SmoothieMethod

    return [SmoothieMethod(range(len(ctx.pool)), ctx.encoder, options=ctx.bounded())]


def _router_dir(kind: str, arg: str, spec: str, router_dirs: dict[str, str | Path] | None) -> Path:
    if arg:
        return Path(arg)
    if router_dirs and kind in router_dirs:
        return Path(router_dirs[kind])
    root = os.environ.get(ROUTER_DIR_ENV)
    if root:
        return Path(root) / kind
    raise ConductorError(
        f"baseline '{spec}': give the trained router's folder ({kind}:DIR) or set "
        f"${ROUTER_DIR_ENV}; train one with fit_{kind} on records of the 'single' baseline"
    )


def _trained_router(kind: str, spec: str, arg: str, ctx: _Build):
    """The trained router of ``kind`` (imports torch); it must know the pool's workers."""
    path = _router_dir(kind, arg, spec, ctx.router_dirs)
    try:
        if kind == "routerdc":
            # lazy: conductor --help imports this module; the methods stack adds ~150 ms
            from conductor_core.evaluate.routers.routerdc import RouterDC

            router = RouterDC(path, ctx.encoder)
        else:
            # lazy: conductor --help imports this module; the methods stack adds ~150 ms
            from conductor_core.evaluate.routers.masrouter import MASRouter

            router = MASRouter(path, ctx.encoder)
    except (ConfigError, ValueError) as exc:
        raise ConductorError(f"baseline '{spec}': {exc}") from exc
    if len(router.worker_methods) != len(ctx.pool):
        raise ConductorError(
            f"baseline '{spec}': the router was trained for {len(router.worker_methods)} workers "
            f"({', '.join(router.worker_methods)}), the pool has {len(ctx.pool)}"
        )
    return path, router


def _routerdc(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import SOLVE, PlanSourceMethod
    from conductor_core.evaluate.routers.base import RoutedPlanSource

    path, router = _trained_router("routerdc", spec, arg, ctx)

    def choose(question: str) -> Workflow:
        return Workflow(steps=(Step(worker=router.route(question), subtask=SOLVE),))

    return [
        PlanSourceMethod(
            f"routerdc[{router.encoder.name}]",
            RoutedPlanSource(f"routerdc {path.name}", choose),
            ctx.bounded(1),
            bare_question=True,
        )
    ]


def _masrouter(spec: str, arg: str, ctx: _Build) -> list[Method]:
    # lazy: conductor --help imports this module; the methods stack adds ~150 ms
    from conductor_core.evaluate.methods import PlanSourceMethod
    from conductor_core.evaluate.routers.base import RoutedPlanSource

    path, router = _trained_router("masrouter", spec, arg, ctx)
    return [
        PlanSourceMethod(
            f"masrouter[{router.encoder.name}]",
            RoutedPlanSource(f"masrouter {path.name}", router.plan),
            ctx.bounded(3),
        )
    ]


BASELINES: dict[str, Baseline] = {
    "single": Baseline(
        (
            ("single", "each worker alone (one method per worker)"),
            ("single:W", "worker W alone"),
        ),
        _single,
    ),
    "moa": Baseline(
        (
            (
                "moa[:L[:A]]",
                "mixture-of-agents: every worker proposes (L layers, default 1), worker A "
                "aggregates (default: the pool's `aggregator`, else its last worker)",
            ),
        ),
        _moa,
    ),
    "sc": Baseline(
        (("sc:W[:N]", "self-consistency: N samples of worker W (default 5), majority vote"),),
        _sc,
    ),
    "reflect": Baseline(
        (("reflect:W[:N]", "self-reflection: worker W answers, then revises N times (default 4)"),),
        _reflect,
    ),
    "random": Baseline(
        (
            (
                "random[:SEED]",
                "random plans with the Conductor's plan-length distribution (sanity floor)",
            ),
        ),
        _random,
    ),
    "frontier": Baseline(
        (("frontier:W", "pool worker W (an openai-provider worker) as an untrained conductor"),),
        _frontier,
    ),
    "smoothie": Baseline(
        (
            (
                "smoothie",
                "Smoothie (label-free): every worker answers, the answer whose embedding agrees "
                "most with the others (triplet estimate) is kept",
            ),
        ),
        _smoothie,
    ),
    "routerdc": Baseline(
        (
            (
                "routerdc[:DIR]",
                "RouterDC: a trained query router (`conductor eval fit-router routerdc`) sends "
                "the question to one worker",
            ),
        ),
        _routerdc,
    ),
    "masrouter": Baseline(
        (
            (
                "masrouter[:DIR]",
                "MASRouter: a trained controller (`conductor eval fit-router masrouter`) picks a "
                "collaboration mode, roles and workers",
            ),
        ),
        _masrouter,
    ),
}
"""Every baseline by kind (the spec's part before the first ``:``)."""

ROUTER_NOTE = (
    "Routers embed text with the evaluation config's `router_encoder` (default all-MiniLM-L6-v2, "
    f"or $CONDUCTOR_ROUTER_ENCODER); a router without DIR is loaded from ${ROUTER_DIR_ENV}/<kind>."
)


def baseline_forms() -> list[str]:
    """Every spelling of every baseline, in registry order (``single``, ``single:W``, ...)."""
    return [form for baseline in BASELINES.values() for form, _ in baseline.forms]


def baseline_help(width: int = 96) -> str:
    """The baselines as a two-column text table (spelling, meaning wrapped to ``width``
    characters), then :data:`ROUTER_NOTE`."""
    import textwrap

    indent = " " * (max(len(form) for form in baseline_forms()) + 2)
    lines = [
        textwrap.fill(
            meaning,
            width,
            initial_indent=form.ljust(len(indent)),
            subsequent_indent=indent,
            break_on_hyphens=False,
        )
        for baseline in BASELINES.values()
        for form, meaning in baseline.forms
    ]
    return "\n".join([*lines, textwrap.fill(ROUTER_NOTE, width, break_on_hyphens=False)])


def build_baselines(
    specs: list[str],
    pool: PoolConfig,
    *,
    options: SolveOptions | None = None,
    plan_lengths: dict[int, float] | None = None,
    encoder: str | None = None,
    router_dirs: dict[str, str | Path] | None = None,
) -> list[Method]:
    """Methods for the given baseline specs (see :data:`BASELINES`).

    ``options`` are the Conductor's solve options (the baselines share its budget);
    ``plan_lengths`` the random baseline's plan-length distribution; ``encoder`` the routers'
    sentence encoder (a model folder or name; default all-MiniLM-L6-v2); ``router_dirs`` maps
    ``routerdc``/``masrouter`` to trained router folders for specs without a DIR. An unknown
    kind raises :class:`ConductorError` listing :func:`baseline_help`.
    """
    ctx = _Build(
        pool=pool,
        options=options or SolveOptions(answer_fallback=True),
        plan_lengths=plan_lengths,
        encoder=encoder,
        router_dirs=router_dirs,
    )
    methods: list[Method] = []
    for spec in (s.strip() for s in specs if s.strip()):
        kind, _, arg = spec.partition(":")
        baseline = BASELINES.get(kind)
        if baseline is None:
            raise ConductorError(f"unknown baseline '{spec}'. Known forms:\n{baseline_help()}")
        methods += baseline.build(spec, arg, ctx)
    return methods
