"""Conductor: train, evaluate and serve learned LLM orchestrators.

The package is a plain Python library. Heavy dependencies (torch, transformers, trl, vllm,
great_expectations, mlflow, kubernetes) are imported lazily inside the modules that need them,
so that ``import conductor_core`` and the ``conductor`` command start fast.
"""

__version__ = "0.1.0"
