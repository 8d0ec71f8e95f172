"""Named evaluation presets: the paper's whole results table as a list of EvalConfigs.

``conductor eval run --preset paper-main`` runs every benchmark of the paper's table (PAPER.md,
"Evaluation") with the evaluation sets exactly as reported; ``--shard i/n`` shards each of them.
Data come from local copies (``CONDUCTOR_DATA_<NAME>`` or ``$CONDUCTOR_DATA_DIR/<name>``, see
:mod:`conductor_core.tasks.sources.local`), else the hub. The paper's reference numbers ship as
data (``resources/eval/paper_reference.yaml``) and the reports show them beside the run's.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from conductor_core.configfiles import deep_merge
from conductor_core.errors import ConfigError
from conductor_core.tasks.sources.local import default_path, expand_env

IN_DOMAIN = ("math500", "mmlu", "rlpr", "livecodebench")

#: benchmark key -> (loader name, split, options): the paper's evaluation sets
PAPER_SETS: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "math500": ("math500", None, {"subset": "paper100"}),
    "mmlu": ("mmlu", "test", {"part": "heldout"}),
    "rlpr": ("rlpr", "train", {"part": "heldout"}),
    "livecodebench": ("livecodebench", None, {"version": "v6", "only_new": True}),
    "aime2025": ("aime2025", None, {}),
    "gpqa_diamond": ("gpqa_diamond", None, {}),
    "bigcodebench": ("bigcodebench", "complete", {"subset": "hard"}),
}

#: benchmark key -> runs per problem in the presets. The paper repeats each run "up to 16 times"
#: without saying how often per benchmark; here each benchmark gets at least about 500 graded
#: attempts (repeats = min(16, ceil(500 / problems))), so that the small sets are not the noisy
#: ones: AIME 2025 (30) 16, MATH500's 100 5, BigCodeBench hard (148) 4, GPQA-Diamond (198) and
#: LiveCodeBench v6's new problems (about 175) 3, the MMLU and RLPR held-out parts (over 1,000
#: each) 1. `--repeats` on the command line overrides them all.
PAPER_REPEATS: dict[str, int] = {
    "math500": 5,
    "mmlu": 1,
    "rlpr": 1,
    "livecodebench": 3,
    "aime2025": 16,
    "gpqa_diamond": 3,
    "bigcodebench": 4,
}

PRESETS = ("paper-main", "paper-constrained")


def paper_reference() -> dict[str, dict[str, dict[str, float]]]:
    """The paper's numbers: setting -> method -> benchmark -> accuracy (%)."""
    text = resources.files("conductor_core.resources") / "eval" / "paper_reference.yaml"
    return yaml.safe_load(text.read_text(encoding="utf-8"))


def preset_configs(name: str, overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The EvalConfig dicts of preset ``name`` (one per benchmark), ``overrides`` merged into each
    (the command line's options; ``output_dir`` gets one sub-folder per benchmark)."""
    if name not in PRESETS:
        raise ConfigError(f"--preset: unknown preset '{name}'; use one of {', '.join(PRESETS)}")
    setting = "unconstrained" if name == "paper-main" else "constrained"
    keys = list(PAPER_SETS) if name == "paper-main" else list(IN_DOMAIN)
    pool = str(resources.files("conductor_core.resources") / "pools" / "paper.yaml")
    base_out = (overrides or {}).get("output_dir", f"runs/{name}")
    out = []
    for key in keys:
        bench, split, options = PAPER_SETS[key]
        cfg: dict[str, Any] = {
            "benchmark": bench,
            "path": expand_env(default_path(key)),
            "split": split,
            "options": dict(options),
            "pool": pool,
            "setting": setting,
            "conductor_name": "conductor",
            "repeats": PAPER_REPEATS[key],
        }
        cfg = deep_merge(cfg, {k: v for k, v in (overrides or {}).items() if k != "benchmark"})
        cfg["output_dir"] = f"{base_out}/{key}"
        out.append(cfg)
    return out


def preset_setting(name: str) -> str:
    """The paper setting a preset reproduces."""
    return "unconstrained" if name == "paper-main" else "constrained"
