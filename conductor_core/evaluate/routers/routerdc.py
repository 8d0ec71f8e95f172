"""RouterDC (Chen et al., 2024, "RouterDC: Query-Based Router by Dual Contrastive Learning for
Assembling Large Language Models"), as a baseline.

A query encoder ``E`` and one learnable embedding ``k_t`` per worker; a question goes to the worker
with the largest similarity ``sim(E(x), k_t)`` (cosine). Training uses each training question's
per-worker scores (here: correctness from ``single:W`` evaluation records) with two contrastive
losses:

* sample-LLM: for each question, each of the top-K workers is pulled towards ``E(x)`` against the
  workers that scored lower (``-log(e^{s+} / (e^{s+} + sum e^{s-}))``); questions where every
  worker scored the same carry no routing signal and are skipped;
* sample-sample: the training questions are clustered with k-means on their (frozen) embeddings;
  each question is pulled towards a question of its own cluster against questions of other clusters
  in the batch (keeps similar questions close, which the paper found stabilises training).

The loss is ``L_sample-LLM + lambda * L_sample-sample``. Simplification (CPU-friendly): the paper
fine-tunes the whole encoder (mDeBERTa); here the sentence encoder is frozen and only a small
residual projection head on top of it is trained, together with the worker embeddings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from conductor_core.tasks.problem import Problem


@dataclass
class RouterDCConfig:
    """Hyper-parameters of :func:`fit_routerdc` (saved with the router)."""

    dim: int = 128
    hidden: int = 256
    temperature: float = 0.2
    top_k: int = 1
    clusters: int = 6
    sample_weight: float = 1.0
    """``lambda``, the weight of the sample-sample loss."""
    negatives: int = 8
    """Out-of-cluster questions per question in the sample-sample loss."""
    epochs: int = 40
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0


def _head(in_dim: int, cfg: RouterDCConfig) -> Any:
    import torch

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.skip = torch.nn.Linear(in_dim, cfg.dim)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(in_dim, cfg.hidden),
                torch.nn.GELU(),
                torch.nn.Linear(cfg.hidden, cfg.dim),
            )

        def forward(self, x: Any) -> Any:
            return torch.nn.functional.normalize(self.skip(x) + self.mlp(x), dim=-1)

    return Head()


def kmeans(x: Any, k: int, seed: int = 0, iters: int = 50) -> Any:
    """Cluster labels of the rows of ``x`` (a torch tensor) by k-means (k-means++ seeding)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    k = max(1, min(k, n))
    centres = [x[torch.randint(n, (1,), generator=g)].squeeze(0)]
    for _ in range(1, k):
        d = torch.cdist(x, torch.stack(centres)).min(1).values ** 2
        probs = d / d.sum() if float(d.sum()) > 0 else torch.full((n,), 1.0 / n)
        centres.append(x[torch.multinomial(probs, 1, generator=g)].squeeze(0))
    c = torch.stack(centres)
    labels = torch.zeros(n, dtype=torch.long)
    for _ in range(iters):
        labels = torch.cdist(x, c).argmin(1)
        new = torch.stack(
            [x[labels == j].mean(0) if (labels == j).any() else c[j] for j in range(k)]
        )
        if torch.allclose(new, c):
            break
        c = new
    return labels


def _sample_llm_loss(q: Any, keys: Any, scores: Any, cfg: RouterDCConfig) -> Any:
    """Sample-LLM contrastive loss: each of a question's top-K workers against every worker that
    scored lower on it (questions with no lower-scoring worker are left out)."""
    import torch

    sims = q @ torch.nn.functional.normalize(keys, dim=-1).T / cfg.temperature  # (B, T)
    k = min(cfg.top_k, scores.shape[1])
    pos_idx = scores.argsort(dim=1, descending=True)[:, :k]  # (B, K)
    pos = sims.gather(1, pos_idx)
    neg = scores[:, None, :] < scores.gather(1, pos_idx)[:, :, None]  # (B, K, T)
    neg_logits = sims[:, None, :].expand_as(neg).masked_fill(~neg, float("-inf"))
    logits = torch.cat([pos[..., None], neg_logits], dim=-1)
    valid = neg.any(-1)
    if not bool(valid.any()):
        return sims.sum() * 0.0
    return (torch.logsumexp(logits, dim=-1) - pos)[valid].mean()


def _sample_sample_loss(q: Any, labels: Any, cfg: RouterDCConfig, g: Any) -> Any:
    """Sample-sample contrastive loss: each question against one random question of its k-means
    cluster and up to ``cfg.negatives`` random questions of other clusters in the batch."""
    import torch

    b = q.shape[0]
    sims = q @ q.T / cfg.temperature
    same = labels[:, None] == labels[None, :]
    same = same & ~torch.eye(b, dtype=torch.bool)
    other = labels[:, None] != labels[None, :]
    noise = torch.rand((b, b), generator=g)
    pos_idx = noise.masked_fill(~same, -1.0).argmax(1)
    n_neg = min(cfg.negatives, b)
    neg_rank = torch.rand((b, b), generator=g).masked_fill(~other, -1.0)
    neg_val, neg_idx = neg_rank.topk(n_neg, dim=1)
    neg_logits = sims.gather(1, neg_idx).masked_fill(neg_val < 0, float("-inf"))
    pos = sims.gather(1, pos_idx[:, None]).squeeze(1)
    valid = same.any(1) & other.any(1)
    if not bool(valid.any()):
        return sims.sum() * 0.0
    logits = torch.cat([pos[:, None], neg_logits], dim=1)
    return (torch.logsumexp(logits, dim=1) - pos)[valid].mean()


def fit_routerdc(
    records: Iterable[EvalRecord],
    problems: Sequence[Problem],
    out_dir: str | Path,
    *,
    worker_methods: Sequence[str],
    encoder: str | SentenceEncoder | None = None,
    config: RouterDCConfig | None = None,
) -> Path:
    """Train a RouterDC router on the per-worker correctness that ``records`` hold for
    ``problems`` (the records of the methods ``worker_methods``, one per pool worker in pool
    order, e.g. ``single:sim-math``) and save it in ``out_dir``; returns the folder."""
    import torch

    cfg = config or RouterDCConfig()
    enc = encoder if isinstance(encoder, SentenceEncoder) else get_encoder(encoder)
    kept, rows = correctness_table(records, problems, worker_methods)
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.tensor(enc.encode([p.question for p in kept]))
    scores = torch.tensor(rows, dtype=torch.float32)
    labels = kmeans(x, cfg.clusters, cfg.seed)
    head = _head(x.shape[1], cfg)
    keys = torch.nn.Parameter(torch.randn(len(worker_methods), cfg.dim) * 0.1)
    opt = torch.optim.AdamW([*head.parameters(), keys], lr=cfg.lr, weight_decay=1e-4)
    n = x.shape[0]
    history = []
    with torch_threads(1):
        for _ in range(cfg.epochs):
            perm = torch.randperm(n, generator=g)
            total = 0.0
            for start in range(0, n, cfg.batch_size):
                idx = perm[start : start + cfg.batch_size]
                q = head(x[idx])
                loss = _sample_llm_loss(q, keys, scores[idx], cfg)
                if cfg.sample_weight:
                    loss = loss + cfg.sample_weight * _sample_sample_loss(q, labels[idx], cfg, g)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            history.append(total / n)
    return save_router(
        out_dir,
        "routerdc",
        {"head": head.state_dict(), "keys": keys.detach()},
        encoder=enc,
        worker_methods=worker_methods,
        in_dim=x.shape[1],
        config=cfg,
        train_questions=len(kept),
        loss_history=history,
    )


class RouterDC:
    """A trained RouterDC router loaded from the folder :func:`fit_routerdc` wrote."""

    def __init__(self, path: str | Path, encoder: str | None = None) -> None:
        self.path = Path(path)
        self.meta = read_router_meta(self.path, "routerdc")
        import torch

        self.config = RouterDCConfig(**self.meta["config"])
        self.encoder = get_encoder(encoder or saved_encoder(self.meta))
        state = load_router_weights(self.path)
        self.head = _head(int(self.meta["in_dim"]), self.config)
        self.head.load_state_dict(state["head"])
        self.head.eval()
        self.keys = torch.nn.functional.normalize(state["keys"], dim=-1)
        self.worker_methods: list[str] = list(self.meta["worker_methods"])

    def scores(self, questions: Sequence[str]) -> Any:
        """``(len(questions), workers)`` cosine similarities of the questions to the workers."""
        import torch

        with torch.no_grad():
            q = self.head(torch.tensor(self.encoder.encode(list(questions))))
            return (q @ self.keys.T).numpy()

    def route(self, question: str) -> int:
        """The worker (pool position) the question goes to."""
        return int(self.scores([question])[0].argmax())
