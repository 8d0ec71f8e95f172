"""What the router baselines share: a plan source that asks a chooser for each question's plan,
and the per-worker correctness table read from evaluation records of ``single:W`` methods."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.evaluate.records import EvalRecord
from conductor_core.policy.fixed import FixedPlanSource
from conductor_core.tasks.problem import Problem
from conductor_core.workflow.model import Workflow


class RoutedPlanSource(FixedPlanSource):
    """A plan source whose first-round plan comes from ``choose(question)`` (a router); later
    rounds keep the answer. ``label`` heads the raw plan text."""

    def __init__(self, label: str, choose: Callable[[str], Workflow]) -> None:
        super().__init__(label, lambda request: choose(request.question))
        self.choose = choose


def correctness_table(
    records: Iterable[EvalRecord],
    problems: Sequence[Problem],
    worker_methods: Sequence[str],
) -> tuple[list[Problem], list[list[float]]]:
    """Per problem, each worker's mean correctness over its graded repeats, from the records of the
    methods ``worker_methods`` (one per worker, in pool order, e.g. ``single:sim-math``).

    Infrastructure failures are left out; problems without a graded record for every worker are
    dropped. Returns the kept problems and their score rows.
    """
    index = {m: w for w, m in enumerate(worker_methods)}
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(worker_methods))
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * len(worker_methods))
    for r in records:
        w = index.get(r.method)
        if w is None or r.infra_error:
            continue
        sums[r.problem_id][w] += float(r.correct)
        counts[r.problem_id][w] += 1
    kept: list[Problem] = []
    rows: list[list[float]] = []
    for p in problems:
        c = counts.get(p.id)
        if c is None or min(c) == 0:
            continue
        kept.append(p)
        rows.append([s / n for s, n in zip(sums[p.id], c, strict=True)])
    if not kept:
        raise ValueError(
            f"no problem has graded records of every worker method {list(worker_methods)}; "
            "evaluate the 'single' baseline on the training split first"
        )
    return kept, rows


def single_methods(display_names: Sequence[str]) -> list[str]:
    """The ``single:W`` method names of a pool's workers, in pool order."""
    return [f"single:{n}" for n in display_names]


class torch_threads:
    """Run a block with ``n`` torch CPU threads (the routers' heads are tiny: more threads only
    add synchronisation, and on shared cores they contend), restoring the setting after."""

    def __init__(self, n: int = 1) -> None:
        self.n = n
        self.saved = 0

    def __enter__(self) -> None:
        import torch

        self.saved = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_num_threads(self.saved)


ROUTER_FILE = "router.json"
"""A trained router's settings and metadata, beside its weights (:data:`WEIGHTS_FILE`)."""
WEIGHTS_FILE = "weights.pt"


def save_router(
    out_dir: str | Path,
    kind: str,
    weights: dict[str, Any],
    *,
    encoder: Any,
    worker_methods: Sequence[str],
    in_dim: int,
    config: Any,
    **extra: Any,
) -> Path:
    """Save a trained router into ``out_dir``: its tensors (:data:`WEIGHTS_FILE`) and its metadata
    (:data:`ROUTER_FILE`: kind, encoder, input size, workers, the dataclass ``config`` and
    ``extra``); returns the folder."""
    import dataclasses

    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out / WEIGHTS_FILE)
    meta = {
        "kind": kind,
        "encoder": encoder.name,
        "encoder_location": encoder.location,
        "in_dim": int(in_dim),
        "worker_methods": list(worker_methods),
        **extra,
        "config": dataclasses.asdict(config),
    }
    (out / ROUTER_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out


def load_router_weights(path: Path) -> dict[str, Any]:
    """The tensors a router saved into ``path`` (:data:`WEIGHTS_FILE`), on the CPU.

    ``weights_only=True`` explicitly (not torch's default, which older releases had False): a
    router folder may come from elsewhere, and a full unpickle runs whatever code the file names.
    A file holding anything but tensors and plain containers is a :class:`ConfigError`, and
    nothing in it runs.
    """
    import pickle
    import re

    import torch

    file = path / WEIGHTS_FILE
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's message is a multi-line how-to-bypass; keep only what the file held.
        found = re.search(r"WeightsUnpickler error: ([^\n]*?\.)(?:\s|$)", str(exc))
        reason = f" ({found.group(1)})" if found else ""
        raise ConfigError(
            f"{file}: refusing to load a weights file that holds more than tensors{reason}"
        ) from exc


def read_router_meta(path: Path, kind: str) -> dict[str, Any]:
    """The metadata of the ``kind`` router trained into ``path`` (by ``fit_<kind>``); a clear
    error when the folder holds none or another kind."""
    meta_file = path / ROUTER_FILE
    if not meta_file.is_file():
        raise ConfigError(f"{path}: no {ROUTER_FILE}; train the router with fit_{kind}")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if meta.get("kind") != kind:
        raise ConfigError(f"{path}: not a {kind} router ({meta.get('kind')})")
    return meta


def saved_encoder(meta: dict[str, Any]) -> str:
    """The encoder a router was trained with: its folder when it still exists, else its name."""
    location = meta.get("encoder_location")
    if location and Path(location).is_dir():
        return str(location)
    return str(meta.get("encoder"))
