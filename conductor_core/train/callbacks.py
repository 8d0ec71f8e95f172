"""The training stages' Trainer callbacks: tracking, checkpoint upload, a resumed run's KL
reference.

It imports transformers at module level, so its callers
(:func:`~conductor_core.train.grpo.make_callbacks`,
:func:`~conductor_core.train.grpo.reference_from_checkpoint`) import it inside functions, as they
do :mod:`~conductor_core.train.trainers`: importing the rest of ``conductor_core.train`` does not
load them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from conductor_core.train import checkpoints
from conductor_core.train.reward import ScoredBatch
from conductor_core.train.stage_tracker import Tracker

__all__ = ["ReferenceFromCheckpoint", "S3CheckpointSync", "TrackingCallback"]


class TrackingCallback(TrainerCallback):
    """Metrics to the tracker and ``history``, the first ``sample_plans`` plans of each logged
    step to ``samples``.

    The trainer hands it each batch the stage's reward scored (``on_batch_scored``,
    :mod:`~conductor_core.train.trainers`); it logs the latest with each of TRL's logs: its
    metrics (``conductor/*``, where TRL's logs do not have them already), its questions (one id
    per group of ``plans_per_question``) and its first plans.
    """

    def __init__(
        self,
        tracker: Tracker,
        history: list[dict[str, Any]],
        samples: list[dict[str, Any]],
        *,
        plans_per_question: int,
        sample_plans: int,
    ) -> None:
        self.tracker = tracker
        self.history = history
        self.samples = samples
        self.plans_per_question = plans_per_question
        self.sample_plans = sample_plans
        self.scored: ScoredBatch | None = None  # the latest batch the trainer handed on

    def on_batch_scored(self, args, state, control, scored=None, **kwargs):
        """Keep the batch the trainer just scored, for the next log."""
        self.scored = scored

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Log TRL's metrics with the latest batch's, and its sample plans."""
        if not logs:
            return
        metrics = {k: float(v) for k, v in logs.items() if isinstance(v, int | float)}
        step = int(state.global_step)
        scored = self.scored
        for name, value in (scored.metrics if scored else {}).items():
            metrics.setdefault(f"conductor/{name}", value)
        self.tracker.log_metrics(metrics, step)
        ids = list(scored.problem_ids) if scored else []
        self.history.append(
            {"step": float(step), **metrics, "problem_ids": ids[:: self.plans_per_question]}
        )
        plans = zip(scored.texts, scored.outcomes, strict=True) if scored else ()
        for text, outcome in list(plans)[: self.sample_plans]:
            self.samples.append(
                {
                    "step": step,
                    "domain": outcome.domain,
                    "plan": text,
                    "reward": outcome.reward,
                    "format_error": outcome.format_error_code,
                    "workers": json.dumps(outcome.workers),
                }
            )


class S3CheckpointSync(TrainerCallback):
    """Uploads each checkpoint the trainer saves to ``remote`` (``s3://…``), under its name."""

    def __init__(self, remote: str) -> None:
        self.remote = remote.rstrip("/")

    def on_save(self, args, state, control, **kwargs):
        """Upload the checkpoint just saved."""
        name = f"checkpoint-{state.global_step}"
        local = Path(args.output_dir) / name
        if local.is_dir():
            checkpoints.upload_dir(local, f"{self.remote}/{name}")


class ReferenceFromCheckpoint(TrainerCallback):
    """For a resumed run with ``ref_sync_steps``: before its first step the KL reference of
    ``trainer`` becomes the checkpoint's policy (the reference a run that had not stopped would
    hold, exactly when the checkpoint's step is a multiple of ``ref_sync_steps``), not the
    starting model that TRL loads it from."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.done = False

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        """Copy the policy into the reference, once."""
        # TRL at import time is trainers.py's alone (tests/unit/test_layers.py)
        from trl.trainer.callbacks import SyncRefModelCallback

        trainer = self.trainer
        if self.done or trainer.ref_model is None:
            return
        self.done = True  # after the checkpoint's weights are loaded, whatever the backend
        policy = trainer.accelerator.unwrap_model(model or trainer.model)
        SyncRefModelCallback.sync_target_model(policy, trainer.ref_model, 1.0)
