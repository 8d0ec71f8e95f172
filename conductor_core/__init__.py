"""Conductor: train, evaluate and serve learned LLM orchestrators.

The package is a plain Python library. Heavy dependencies (torch, transformers, trl, vllm,
great_expectations, mlflow, kubernetes) are imported lazily inside the modules that need them,
so that ``import conductor_core`` and the ``conductor`` command start fast.

The Python API (:mod:`conductor_core.api`), loaded on first use::

    from conductor_core import Conductor
    from conductor_core.api import evaluate, train

    with Conductor() as conductor:
        print(conductor.solve("Calculate: (56 + 26) * 25 = ?").answer)

(``evaluate`` and ``train`` stay in :mod:`conductor_core.api`: ``conductor_core.evaluate`` and
``conductor_core.train`` are the subpackages that do the work.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Conductor", "PlanStep", "SolveResult", "__version__"]
_API = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.api import Conductor, PlanStep, SolveResult


def __getattr__(name: str) -> Any:
    """The API's names, imported when first asked for (PEP 562)."""
    if name in _API:
        # lazy: every conductor command imports this package; api adds ~40 ms (asyncio)
        from conductor_core import api

        return getattr(api, name)
    raise AttributeError(f"module 'conductor_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
