"""MASRouter (Yue et al., 2025, "MasRouter: Learning to Route LLMs for Multi-Agent Systems"), as a
baseline: a simplified, documented version.

MASRouter builds a multi-agent system per question with a cascaded controller, trained by policy
gradient on utility minus cost:

1. collaboration-mode determiner: picks how the agents work together;
2. role allocator: picks each agent's role (roles are text descriptions embedded by the encoder);
3. LLM router: picks the worker that plays each role.

Here (all choices conditioned on the frozen sentence embedding of the question, each level also on
the levels above it):

* modes (:data:`MODES`) are multi-step plans in our workflow format: ``single`` (one agent),
  ``chain`` (an agent solves, a second one reviews with ``["all"]`` access) and ``debate`` (two
  agents answer independently, a judge reads both);
* roles (:data:`ROLES`) are chosen per agent by a bilinear score between the question and the
  role description's embedding (plus a per-mode, per-slot bias); a role becomes the agent's
  subtask wording;
* workers are chosen per agent from the question and the role embedding against learnable worker
  embeddings.

Training is REINFORCE with a per-question group-mean baseline and an entropy bonus, on one of two
rewards (each minus ``cost_weight`` per call):

* **executed** (as the paper): every sampled system runs on the pool and is graded
  (``execute``, e.g. from :func:`pool_executor`); roles then earn reward through the subtasks they
  write. It costs ``epochs x questions x samples`` plan executions.
* **surrogate** (no executions): the per-worker correctness that ``single:W`` records hold scores a
  plan: ``single`` scores its worker's correctness ``c``; a last agent who reads a right answer
  keeps it with probability ``keep_right`` (``chain``: ``c_b + (1 - c_b) c_a k``; ``debate``:
  ``c_j + (1 - c_j) (1 - (1 - c_1)(1 - c_2)) k``). Roles carry no reward of their own there, so
  the role choice rests on the question-to-description similarity.

Inference takes the most likely choice at every level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_core.evaluate.methods import SOLVE, PlanSourceMethod
from conductor_core.evaluate.records import EvalRecord
from conductor_core.evaluate.routers.base import (
    correctness_table,
    load_router_weights,
    read_router_meta,
    save_router,
    saved_encoder,
    torch_threads,
)
from conductor_core.evaluate.routers.encoder import SentenceEncoder, get_encoder
from conductor_core.evaluate.runner import RunConfig, evaluate_one
from conductor_core.policy.fixed import FixedPlanSource
from conductor_core.tasks.problem import Problem
from conductor_core.workers.pool import WorkerPool
from conductor_core.workflow.model import ALL, Step, Workflow

MODES: tuple[str, ...] = ("single", "chain", "debate")
AGENTS = {"single": 1, "chain": 2, "debate": 3}

ROLES: tuple[tuple[str, str], ...] = (
    ("solver", "A careful general problem solver who answers questions of any kind."),
    (
        "mathematician",
        "A mathematician who computes arithmetic and algebra step by step and checks the result.",
    ),
    (
        "analyst",
        "An analyst who answers multiple-choice questions by comparing the options and "
        "eliminating the wrong ones.",
    ),
    (
        "linguist",
        "A linguist who handles words, spelling, letters and text transformations precisely.",
    ),
    (
        "programmer",
        "A programmer who writes correct, efficient code for the task and checks it against its "
        "examples and edge cases.",
    ),
)
"""Roles as (name, description); the description is what the encoder embeds. A saved router
keeps the roles it was trained with."""

PlanExecutor = Callable[[Sequence[tuple[Problem, Workflow]]], Sequence[float | None]]
"""Runs plans and returns each one's graded correctness (1.0 right, 0.0 wrong; None when
infrastructure spoiled it: left out of the update)."""


def role_subtask(mode: str, slot: int, role: str) -> str:
    """The subtask of the agent in ``slot`` of ``mode`` playing ``role``."""
    if mode == "chain" and slot == 1:
        return (
            f"As a {role}, review the previous answer critically, fix any mistake, and give the "
            "final answer in the required format."
        )
    if mode == "debate" and slot == 2:
        return (
            f"As a {role}, judge the agents' answers: check them critically and give the one "
            "correct final answer in the required format."
        )
    return f"As a {role}: {SOLVE}"


def build_plan(mode: str, roles: Sequence[str], workers: Sequence[int]) -> Workflow:
    """The workflow of a collaboration mode with its agents' roles and workers."""
    n = AGENTS[mode]
    if len(roles) != n or len(workers) != n:
        raise ValueError(f"mode {mode} needs {n} roles and workers")
    steps = []
    for slot in range(n):
        last_reads = mode != "single" and slot == n - 1
        steps.append(
            Step(
                worker=int(workers[slot]),
                subtask=role_subtask(mode, slot, roles[slot]),
                access=ALL if last_reads else (),
            )
        )
    return Workflow(steps=tuple(steps))


def surrogate_reward(mode: str, c: Sequence[float], keep_right: float) -> float:
    """Expected correctness of a plan from its agents' single-worker correctness ``c`` (slot
    order): see the module docstring."""
    if mode == "single":
        return c[0]
    if mode == "chain":
        return c[1] + (1 - c[1]) * c[0] * keep_right
    seen = 1 - (1 - c[0]) * (1 - c[1])
    return c[2] + (1 - c[2]) * seen * keep_right


@dataclass
class MASRouterConfig:
    """Hyper-parameters of :func:`fit_masrouter` (saved with the router)."""

    hidden: int = 128
    worker_dim: int = 32
    keep_right: float = 0.9
    cost_weight: float = 0.03
    samples: int = 8
    """Plans sampled per question per step (the group of the group-mean baseline)."""
    entropy: float = 0.01
    epochs: int = 30
    batch_size: int = 32
    lr: float = 3e-3
    seed: int = 0


def _policy(in_dim: int, n_workers: int, n_roles: int, cfg: MASRouterConfig) -> Any:
    import torch

    n_modes, max_slots = len(MODES), max(AGENTS.values())

    class Policy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mode = torch.nn.Sequential(
                torch.nn.Linear(in_dim, cfg.hidden),
                torch.nn.GELU(),
                torch.nn.Linear(cfg.hidden, n_modes),
            )
            self.role_q = torch.nn.Linear(in_dim, in_dim)
            self.role_bias = torch.nn.Parameter(torch.zeros(n_modes, max_slots, n_roles))
            self.worker_q = torch.nn.Sequential(
                torch.nn.Linear(2 * in_dim + n_modes, cfg.hidden),
                torch.nn.GELU(),
                torch.nn.Linear(cfg.hidden, cfg.worker_dim),
            )
            self.worker_emb = torch.nn.Parameter(torch.randn(n_workers, cfg.worker_dim) * 0.1)
            self.role_scale = torch.nn.Parameter(torch.tensor(10.0))

        def mode_logits(self, x: Any) -> Any:
            return self.mode(x)

        def role_logits(self, x: Any, role_emb: Any, mode: Any, slot: int) -> Any:
            sim = torch.nn.functional.normalize(self.role_q(x) + x, dim=-1) @ role_emb.T
            return self.role_scale * sim + self.role_bias[mode, slot]

        def worker_logits(self, x: Any, role_vec: Any, mode: Any) -> Any:
            onehot = torch.nn.functional.one_hot(mode, n_modes).to(x.dtype)
            return self.worker_q(torch.cat([x, role_vec, onehot], dim=-1)) @ self.worker_emb.T

    return Policy()


def _rollout(policy: Any, x: Any, role_emb: Any, greedy: bool, g: Any = None) -> tuple:
    """Sample (or take the argmax of) a mode, then roles and workers per slot, for each row of
    ``x``. Returns modes, roles and workers (``(B, 3)``, -1 where unused), log-probs, entropies."""
    import torch

    def pick(logits: Any) -> tuple[Any, Any, Any]:
        dist = torch.distributions.Categorical(logits=logits)
        if greedy:
            choice = logits.argmax(-1)
        else:
            choice = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(-1)
        return choice, dist.log_prob(choice), dist.entropy()

    b = x.shape[0]
    mode, logp, ent = pick(policy.mode_logits(x))
    max_slots = max(AGENTS.values())
    roles = torch.full((b, max_slots), -1, dtype=torch.long)
    workers = torch.full((b, max_slots), -1, dtype=torch.long)
    n_agents = torch.tensor([AGENTS[m] for m in MODES])[mode]
    for slot in range(max_slots):
        active = n_agents > slot
        r, lp_r, e_r = pick(policy.role_logits(x, role_emb, mode, slot))
        w, lp_w, e_w = pick(policy.worker_logits(x, role_emb[r], mode))
        roles[:, slot] = torch.where(active, r, roles[:, slot])
        workers[:, slot] = torch.where(active, w, workers[:, slot])
        mask = active.to(x.dtype)
        logp = logp + mask * (lp_r + lp_w)
        ent = ent + mask * (e_r + e_w)
    return mode, roles, workers, logp, ent


def _rewards(mode: Any, workers: Any, rows: Any, cfg: MASRouterConfig) -> Any:
    """Surrogate rewards of a batch of plans (see :func:`surrogate_reward`), minus their cost;
    ``rows`` holds each plan's question's per-worker correctness."""
    import torch

    c = rows.gather(1, workers.clamp(min=0))  # (B, slots)
    k = cfg.keep_right
    single = c[:, 0]
    chain = c[:, 1] + (1 - c[:, 1]) * c[:, 0] * k
    seen = 1 - (1 - c[:, 0]) * (1 - c[:, 1])
    debate = c[:, 2] + (1 - c[:, 2]) * seen * k
    value = torch.stack([single, chain, debate], dim=1).gather(1, mode[:, None]).squeeze(1)
    return value - _cost(mode, value.dtype, cfg)


def _cost(mode: Any, dtype: Any, cfg: MASRouterConfig) -> Any:
    """What the plans of ``mode`` (a batch of mode indices) cost: ``cost_weight`` per call."""
    import torch

    return cfg.cost_weight * torch.tensor([AGENTS[m] for m in MODES], dtype=dtype)[mode]


def _decoded(
    mode: Any, roles: Any, workers: Any, role_names: Sequence[str]
) -> tuple[str, list[str], list[int]]:
    """One plan's (mode, role names, workers) from a row of :func:`_rollout`'s output."""
    name = MODES[int(mode)]
    n = AGENTS[name]
    return name, [role_names[int(r)] for r in roles[:n]], [int(w) for w in workers[:n]]


def _executed_rewards(
    execute: PlanExecutor,
    questions: Sequence[Problem],
    mode: Any,
    roles: Any,
    workers: Any,
    cfg: MASRouterConfig,
) -> Any:
    """Graded correctness of the sampled plans (``questions[i]`` for row i; NaN where
    infrastructure spoiled one), minus their cost."""
    import torch

    names = [r[0] for r in ROLES]
    plans = [
        (problem, build_plan(*_decoded(mode[i], roles[i], workers[i], names)))
        for i, problem in enumerate(questions)
    ]
    graded = execute(plans)
    value = torch.tensor([float("nan") if c is None else float(c) for c in graded])
    return value - _cost(mode, value.dtype, cfg)


def fit_masrouter(
    records: Iterable[EvalRecord],
    problems: Sequence[Problem],
    out_dir: str | Path,
    *,
    worker_methods: Sequence[str],
    encoder: str | SentenceEncoder | None = None,
    config: MASRouterConfig | None = None,
    execute: PlanExecutor | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Train a MASRouter controller for ``problems`` over the pool whose workers
    ``worker_methods`` name (one per worker, in pool order); save it in ``out_dir`` and return
    the folder.

    With ``execute``, each sampled system is run and graded (the executed reward; ``records``
    unused); without, the per-worker correctness in ``records`` (methods ``worker_methods``)
    scores it through the surrogate (module docstring). ``log`` gets one line per epoch."""
    import torch

    cfg = config or MASRouterConfig()
    enc = encoder if isinstance(encoder, SentenceEncoder) else get_encoder(encoder)
    if execute is None:
        kept, rows = correctness_table(records, problems, worker_methods)
        scores = torch.tensor(rows, dtype=torch.float32)
    else:
        kept, scores = list(problems), None
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    x_all = torch.tensor(enc.encode([p.question for p in kept]))
    role_emb = torch.tensor(enc.encode([d for _, d in ROLES]))
    policy = _policy(x_all.shape[1], len(worker_methods), len(ROLES), cfg)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=1e-4)
    n = x_all.shape[0]
    history = []
    with torch_threads(1):
        for _ in range(cfg.epochs):
            perm = torch.randperm(n, generator=g)
            total = 0.0
            for start in range(0, n, cfg.batch_size):
                idx = perm[start : start + cfg.batch_size]
                x = x_all[idx].repeat_interleave(cfg.samples, dim=0)
                mode, roles, workers, logp, ent = _rollout(policy, x, role_emb, greedy=False, g=g)
                if scores is None:
                    asked = [kept[int(i)] for i in idx for _ in range(cfg.samples)]
                    flat = _executed_rewards(execute, asked, mode, roles, workers, cfg)
                else:
                    plan_rows = scores[idx].repeat_interleave(cfg.samples, dim=0)
                    flat = _rewards(mode, workers, plan_rows, cfg)
                rewards = flat.view(-1, cfg.samples)
                # A plan spoiled by infrastructure is left out: of its group's baseline, and of
                # the update (advantage 0).
                scored = ~rewards.isnan()
                count = scored.sum(1, keepdim=True).clamp(min=1)
                baseline = rewards.nan_to_num(0.0).sum(1, keepdim=True) / count
                adv = torch.where(scored, rewards - baseline, 0.0).flatten()
                loss = -(adv * logp).mean() - cfg.entropy * ent.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(baseline.sum())
            history.append(total / n)
            if log is not None:
                log(f"epoch {len(history)}/{cfg.epochs}: mean reward {history[-1]:.3f}")
    return save_router(
        out_dir,
        "masrouter",
        {"policy": policy.state_dict()},
        encoder=enc,
        worker_methods=worker_methods,
        in_dim=x_all.shape[1],
        config=cfg,
        modes=list(MODES),
        roles=[list(r) for r in ROLES],
        reward="surrogate" if execute is None else "executed",
        train_questions=len(kept),
        reward_history=history,
    )


@contextmanager
def pool_executor(pool: Any, *, concurrency: int = 32) -> Iterator[PlanExecutor]:
    """A :data:`PlanExecutor` that runs each plan on ``pool`` (a :class:`PoolConfig`) and grades
    it as evaluation does (:func:`~conductor_core.evaluate.runner.evaluate_one`: the solve loop,
    infrastructure retries); one worker pool and event loop serve every call until the ``with``
    block ends."""
    import asyncio

    run_config = RunConfig(keep_traces=False, progress=False, batch_planning=False)
    with asyncio.Runner() as runner:
        workers = WorkerPool(pool)
        runner.run(workers.__aenter__())

        async def graded(plans: Sequence[tuple[Problem, Workflow]]) -> list[float | None]:
            sem = asyncio.Semaphore(concurrency)

            async def one(k: int, problem: Problem, plan: Workflow) -> float | None:
                method = PlanSourceMethod("masrouter", FixedPlanSource("masrouter", lambda _: plan))
                async with sem:
                    record = await evaluate_one(method, problem, k, workers, run_config)
                return None if record.infra_error else float(record.correct)

            return list(await asyncio.gather(*(one(k, p, wf) for k, (p, wf) in enumerate(plans))))

        try:
            yield lambda plans: runner.run(graded(plans))
        finally:
            runner.run(workers.__aexit__(None, None, None))


class MASRouter:
    """A trained MASRouter controller loaded from the folder :func:`fit_masrouter` wrote."""

    def __init__(self, path: str | Path, encoder: str | None = None) -> None:
        self.path = Path(path)
        self.meta = read_router_meta(self.path, "masrouter")
        import torch

        self.config = MASRouterConfig(**self.meta["config"])
        self.encoder = get_encoder(encoder or saved_encoder(self.meta))
        self.worker_methods: list[str] = list(self.meta["worker_methods"])
        self.roles: list[tuple[str, str]] = [(r[0], r[1]) for r in self.meta.get("roles", ROLES)]
        self.policy = _policy(
            int(self.meta["in_dim"]), len(self.worker_methods), len(self.roles), self.config
        )
        state = load_router_weights(self.path)
        self.policy.load_state_dict(state["policy"])
        self.policy.eval()
        self.role_emb = torch.tensor(self.encoder.encode([d for _, d in self.roles]))

    def decide(self, question: str) -> tuple[str, list[str], list[int]]:
        """The (mode, roles, workers) the controller picks for ``question`` (greedy)."""
        import torch

        with torch.no_grad():
            x = torch.tensor(self.encoder.encode([question]))
            mode, roles, workers, _, _ = _rollout(self.policy, x, self.role_emb, greedy=True)
        return _decoded(mode[0], roles[0], workers[0], [r[0] for r in self.roles])

    def plan(self, question: str) -> Workflow:
        """The workflow for ``question``."""
        return build_plan(*self.decide(question))
