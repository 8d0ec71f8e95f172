"""The workflow's events as the gateway streams them: solve-loop and executor events turned into
:class:`~conductor_core.serve.protocol.ConductorEvent` (the ``conductor`` field of a chunk), with
workers named as the pool names them and errors fit for a client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conductor_core.serve.protocol import ConductorEvent

__all__ = ["EventTranslator"]


class EventTranslator:
    """Turns solve-loop and executor events into :class:`ConductorEvent` (pool worker ids, as
    plans are written; a step's error passed through ``redact``)."""

    def __init__(
        self,
        worker_names: list[str],
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.names = worker_names
        self.redact = redact
        self.round = 0

    def _name(self, worker: int) -> str:
        return self.names[worker] if 0 <= worker < len(self.names) else str(worker)

    def __call__(self, event: dict[str, Any]) -> ConductorEvent:
        kind = event.get("type", "")
        if "round" in event:
            self.round = int(event["round"])
        data = {k: v for k, v in event.items() if k not in ("type", "round")}
        if kind == "plan_end":
            kind = "plan"
            plan = event.get("plan")
            if plan:
                data["workers"] = list(plan.get("model_id", []))
        elif kind == "step_start":
            data["worker_name"] = self._name(int(event["worker"]))
        elif kind == "step_end":
            step = dict(event.get("step") or {})
            data = {**step, "worker_name": self._name(int(step.get("worker", -1)))}
            if isinstance(data.get("error"), str):
                data["error"] = self.redact(data["error"])
        return ConductorEvent(type=kind, round=self.round, data=data)
