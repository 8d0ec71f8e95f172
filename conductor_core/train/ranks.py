"""Which process of a distributed launch this is, and what only one process may do.

``conductor train`` under ``torchrun --nproc-per-node N`` (or a Kubeflow Trainer TrainJob,
whose torch runtime runs ``torchrun``) starts one process per rank, each running
:func:`~conductor_core.train.grpo.run_stage`. TRL and accelerate split every generation batch
over the ranks and average the gradients (DDP); everything the platform itself writes is done
by the main process (global rank 0) only: the MLflow run (params, metrics, artifacts, the
registered model), the S3 copy of each checkpoint, the final model folder and its upload, and
the summary files. The trainer writes its own checkpoints from rank 0 too (each rank adds its
``rng_state_<rank>.pth``).

Per node, the local main process (local rank 0) prepares what lands on the node's disk
(the tiny model, the format warm-up, a checkpoint downloaded from S3, a dataset copied from
S3) while the node's other ranks wait, then read what it wrote: :func:`local_main_first`.

:func:`current` reads the variables torchrun sets for each worker (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``): without them this is the only process, rank 0 of 1, and
nothing here changes how a stage runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from conductor_core.errors import ConfigError

__all__ = [
    "Ranks",
    "current",
    "init_distributed",
    "is_main_process",
    "local_main_first",
    "wait_for_everyone",
]


@dataclass(frozen=True)
class Ranks:
    """This process's place in a distributed launch (rank 0 of 1 without one)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        """True under a launch with more than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on global rank 0: the one process that logs, saves and uploads."""
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        """True on local rank 0: the process that prepares files on this node's disk."""
        return self.local_rank == 0

    def label(self) -> str:
        """``rank 1/2`` (for log lines)."""
        return f"rank {self.rank}/{self.world_size}"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} must be an integer (torchrun sets it)") from None


def current() -> Ranks:
    """This process's ranks, from the variables torchrun sets for each worker."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", rank if world > 1 else 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} must be in [0, WORLD_SIZE={world})")
    return Ranks(rank=rank, world_size=world, local_rank=local, local_world_size=local_world)


def is_main_process() -> bool:
    """True on the process that logs to MLflow and writes checkpoints and the model."""
    return current().is_main


PROCESS_GROUP_TIMEOUT_S = 1800
"""Timeout of the process group's collectives and barriers (transformers' ``ddp_timeout``
default): the local main's preparation (warm-up, a checkpoint downloaded from S3) must finish
within it while the other ranks wait."""


def init_distributed(device: str) -> None:
    """Join the process group of a distributed launch (gloo on CPU, nccl on CUDA), once.

    Done through accelerate's ``PartialState``, the state TRL's trainer uses: the trainer finds
    the process group already there. Nothing happens without a distributed launch.
    """
    if not current().distributed:
        return
    from datetime import timedelta

    from accelerate import PartialState

    PartialState(cpu=device == "cpu", timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT_S))


def wait_for_everyone() -> None:
    """A barrier over all ranks (nothing without a distributed launch)."""
    if not current().distributed:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


@contextmanager
def local_main_first() -> Iterator[Ranks]:
    """Run the body on this node's local main process first, then on the node's other ranks.

    The local main writes (a built tiny model, the warm-up model, a downloaded checkpoint); the
    others enter once it is done and find those files. Call :func:`init_distributed` first.
    When the body fails on the local main, it raises without releasing the others: torchrun
    then stops them (they never read half-written files).
    """
    ranks = current()
    if ranks.distributed and not ranks.is_local_main:
        wait_for_everyone()
    yield ranks
    if ranks.distributed and ranks.is_local_main:
        wait_for_everyone()
