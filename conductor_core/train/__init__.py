"""GRPO training of the Conductor on TRL: stage configs, dataset, reward, warm-up, stages.

Heavy dependencies (torch, trl, datasets, mlflow) are imported inside the functions that use
them, so importing this package is cheap.
"""

from conductor_core.train.config import StageConfig, build_config, load_config

__all__ = ["StageConfig", "build_config", "bundled_config_path", "load_config"]


def bundled_config_path(stage: str):
    """Path of the bundled YAML config of ``stage`` (``base``, ``adaptive`` or ``recursive``)."""
    from importlib import resources
    from pathlib import Path

    return Path(str(resources.files("conductor_core.resources") / "train" / f"{stage}.yaml"))
