"""The TRL and transformers behaviour the training code relies on, checked on the installed
versions (pyproject.toml pins them; these tests fail on a version outside that window):

- the private GRPOTrainer methods the recursive trainer overrides keep their signatures, the way
  TRL calls them and what they return; TRL sets ``async_loop`` for async rewards and keeps
  ``_metrics[mode]`` as lists to append to;
- a None reward is left out of its group's baseline (TRL < 1.6 scored it 0, so infrastructure
  failures lowered the baseline and pushed the other plans up);
- the learning-rate warm-up of ``warmup_ratio`` is actually applied (a float ``warmup_steps`` is a
  step count before transformers 5, and transformers' ``constant`` schedule has no warm-up);
- the installed versions lie inside the pins, and the ``vllm`` pin inside TRL's vLLM window.
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.unit.test_train_grpo import small

ROOT = Path(__file__).resolve().parents[2]
GROUP = 4
SCORES = [None, 1.0, 2.0, 4.0, 5.0, None, 1.0, None]
"""Rewards of two groups of GROUP plans (None: the plan could not be scored)."""


# --------------------------------------------------------------------------------------------
# Versions


def extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return data["project"]["optional-dependencies"]


def pins(*names: str) -> dict[str, list[Requirement]]:
    """The requirements of the given extras by canonical package name (self-references left out)."""
    out: dict[str, list[Requirement]] = {}
    for extra in names:
        for spec in extras()[extra]:
            req = Requirement(spec)
            if canonicalize_name(req.name) != "conductor-core":
                out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


@pytest.mark.parametrize("package", ["trl", "transformers", "torch"])
def test_installed_versions_are_inside_the_pins(package):
    reqs = pins("local", "train")[package]
    installed = Version(metadata.version(package))
    for req in reqs:
        assert req.specifier, f"{package} is not pinned in pyproject.toml"
        assert req.specifier.contains(installed, prereleases=True), (
            f"{package} {installed} is outside the pin '{req}' in pyproject.toml"
        )


def test_trl_is_pinned_to_one_minor_release():
    """Private methods change within TRL's 1.x (``num_generations`` came in 1.14.1)."""
    (req,) = pins("train")["trl"]
    bounds = {s.operator: Version(s.version) for s in req.specifier}
    assert set(bounds) == {">=", "<"}, req
    low, high = bounds[">="], bounds["<"]
    assert high.release[:2] == (low.major, low.minor + 1), req


def test_vllm_extras_are_inside_trl_window_and_not_in_all():
    window = None
    for spec in metadata.requires("trl") or []:
        req = Requirement(spec)
        if req.name == "vllm" and req.marker and req.marker.evaluate({"extra": "vllm"}):
            window = req.specifier
    assert window is not None, "trl declares no vllm extra"
    (ours,) = pins("vllm")["vllm"]
    bounds = {s.operator: Version(s.version) for s in ours.specifier}
    assert set(bounds) == {">=", "<="}, ours
    assert window.contains(bounds[">="]) and window.contains(bounds["<="]), (
        f"'{ours}' is not inside TRL's supported vLLM window '{window}'"
    )
    assert extras()["gpu"] == ["conductor-core[train,vllm]"]
    everything = " ".join(extras()["all"])
    assert "vllm" not in everything and "gpu" not in everything


# --------------------------------------------------------------------------------------------
# Private methods the recursive trainer overrides


def parameters(func) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(func).parameters.values()]


def test_overridden_private_methods_keep_their_signatures():
    from trl import GRPOTrainer

    from conductor_core.train.recursive import make_recursive_trainer_class

    empty = inspect.Parameter.empty
    expected = {
        "_generate_and_score_completions": [("self", empty), ("inputs", empty)],
        "_generate_single_turn": [
            ("self", empty),
            ("prompt_ids", empty),
            ("images", empty),
            ("multimodal_fields", empty),
            ("num_generations", empty),
            ("has_tool_images", False),
        ],
    }
    recursive = make_recursive_trainer_class()
    for name, params in expected.items():
        assert parameters(getattr(GRPOTrainer, name)) == params, name
        assert parameters(getattr(recursive, name)) == params, name


# --------------------------------------------------------------------------------------------
# A real GRPOTrainer on a tiny model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from conductor_core.policy.tiny import build_tiny_conductor

    t = small(Path("unused")).model.tiny
    out = tmp_path_factory.mktemp("contract") / "tiny"
    return build_tiny_conductor(
        out, hidden=t.hidden, layers=t.layers, heads=t.heads, kv_heads=t.kv_heads, vocab=t.vocab
    )


def rows() -> list[dict]:
    return [
        {"prompt": [{"role": "user", "content": f"question {i // GROUP}"}], "score": s}
        for i, s in enumerate(SCORES)
    ]


async def scored(completions, score, **kwargs):
    """An async reward (like ConductorReward): the row's ``score``, None for unscorable plans."""
    await asyncio.sleep(0)
    return list(score)


def trainer_for(config, tiny_dir, cls=None):
    from datasets import Dataset
    from trl import GRPOTrainer

    from conductor_core.train.grpo import grpo_args, load_model

    model, tokenizer = load_model(str(tiny_dir), config, "cpu")
    args = grpo_args(config, config.output_path() / "checkpoints", "cpu", progress=False)
    return (cls or GRPOTrainer)(
        model=model,
        reward_funcs=[scored],
        args=args,
        train_dataset=Dataset.from_list(rows()),
        processing_class=tokenizer,
    )


EXTRA = [7, 7, 7]


@pytest.fixture(scope="module")
def scored_batch(tiny_dir, tmp_path_factory):
    """One batch through TRL's _generate_and_score_completions, spying on _generate_single_turn.

    The spy takes any arguments (so that a changed signature shows up in the call test, not
    here) and appends EXTRA to the last prompt, as the recursive trainer rewrites round-2 prompts
    in the list it is given.
    """
    from trl import GRPOTrainer

    calls: list[dict] = []

    class Spy(GRPOTrainer):
        def _generate_single_turn(self, *args, **kwargs):
            result = super()._generate_single_turn(*args, **kwargs)
            prompt_ids = args[0] if args else kwargs["prompt_ids"]
            calls.append({"args": args, "kwargs": kwargs, "last": len(prompt_ids[-1])})
            prompt_ids[-1] = list(prompt_ids[-1]) + EXTRA
            calls[-1]["result"] = result
            return result

    out = tmp_path_factory.mktemp("scored")
    config = small(out, questions_per_step=2, plans_per_question=GROUP, scale_rewards="group")
    trainer = trainer_for(config, tiny_dir, cls=Spy)
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows())
    return trainer, output, calls


def test_none_reward_is_left_out_of_the_group_baseline(scored_batch):
    import torch

    trainer, output, _ = scored_batch
    advantages = output["advantages"]
    assert advantages.shape == (len(SCORES),)
    expected = []
    for start in range(0, len(SCORES), GROUP):
        group = SCORES[start : start + GROUP]
        known = [s for s in group if s is not None]
        mean, std = statistics.mean(known), statistics.stdev(known)
        expected += [0.0 if s is None else (s - mean) / (std + 1e-4) for s in group]
    assert torch.allclose(advantages.float(), torch.tensor(expected), atol=1e-4), (
        advantages.tolist(),
        expected,
    )
    # The logged reward averages the scored plans only.
    known = [s for s in SCORES if s is not None]
    assert trainer._metrics["train"]["reward"][-1] == pytest.approx(statistics.mean(known))


def test_generate_single_turn_is_called_and_returns_as_the_override_expects(scored_batch):
    _, output, calls = scored_batch
    (call,) = calls
    # TRL passes (prompt_ids, images, multimodal_fields, num_generations) positionally.
    assert not call["kwargs"] and len(call["args"]) == 4
    prompt_ids, images, multimodal_fields, num_generations = call["args"]
    assert len(prompt_ids) == len(SCORES) and images is None
    assert isinstance(multimodal_fields, dict) and num_generations == GROUP
    # It returns (completion_ids, logprobs), one entry per prompt.
    completion_ids, logprobs = call["result"]
    assert len(completion_ids) == len(SCORES)
    assert all(isinstance(t, int) for ids in completion_ids for t in ids)
    assert logprobs is None or len(logprobs) == len(SCORES)
    # The prompts TRL trains on are the list it passed, as the override left it.
    assert int(output["prompt_mask"][-1].sum()) == call["last"] + len(EXTRA)


def test_async_reward_loop_and_metrics_are_what_the_recursive_trainer_uses(scored_batch):
    trainer, _, _ = scored_batch
    # An async reward starts TRL's event loop, which the recursive trainer schedules work on.
    loop = trainer.async_loop
    assert isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running()
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "ok"), loop).result(5) == "ok"
    # _metrics[mode] maps names to lists that the recursive trainer appends to.
    trainer._metrics["train"]["recursion/contract"].append(1.0)
    assert trainer._metrics["train"]["recursion/contract"] == [1.0]


@pytest.mark.parametrize("mask", [True, False])
def test_truncated_completions_are_left_out_of_the_loss_when_asked(tiny_dir, tmp_path, mask):
    """``mask_truncated_completions`` (the tiny profile's) reaches TRL, which zeroes the loss mask
    of every completion without an end token."""
    from trl import GRPOTrainer

    class Fixed(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            eos = self.processing_class.eos_token_id
            ends = [i % 2 == 0 for i in range(len(prompt_ids))]
            return [[5, 6, eos] if end else [5, 6, 7, 8] for end in ends], None

    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP)
    config = config.model_copy(update={"mask_truncated_completions": mask})
    trainer = trainer_for(config, tiny_dir, cls=Fixed)
    assert trainer.args.mask_truncated_completions is mask
    output = trainer._generate_and_score_completions(rows())
    kept = output["completion_mask"].sum(dim=1).tolist()
    assert kept[0::2] == [3] * (len(SCORES) // 2)  # ended: every token in the loss
    assert kept[1::2] == ([0] if mask else [4]) * (len(SCORES) // 2)


def test_num_iterations_reuses_each_scored_batch(tiny_dir, tmp_path):
    """``num_iterations`` reaches TRL, which generates and scores once per that many optimiser
    steps (the plans, and their worker calls, are reused)."""
    from trl import GRPOTrainer

    generations: list[int] = []

    class Counting(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            generations.append(self.state.global_step)
            return super()._generate_and_score_completions(inputs)

    config = small(tmp_path, steps=4, questions_per_step=2, plans_per_question=GROUP)
    config = config.model_copy(update={"num_iterations": 2})
    trainer = trainer_for(config, tiny_dir, cls=Counting)
    assert trainer.args.num_iterations == 2
    trainer.train()
    assert trainer.state.global_step == 4
    assert generations == [0, 2]


# --------------------------------------------------------------------------------------------
# The learning-rate warm-up


@pytest.mark.parametrize("scheduler", ["cosine", "linear", "constant", "constant_with_warmup"])
def test_warmup_ratio_is_applied(tiny_dir, tmp_path, scheduler):
    peak = 1e-3
    config = small(tmp_path, steps=8, warmup_ratio=0.25, lr_scheduler=scheduler, learning_rate=peak)
    trainer = trainer_for(config, tiny_dir)
    assert trainer.args.get_warmup_steps(config.steps) == 2
    trainer.create_optimizer_and_scheduler(num_training_steps=config.steps)
    lrs = []
    for _ in range(4):
        lrs.append(trainer.lr_scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    # Linear from 0 over ceil(8 * 0.25) = 2 steps, then the peak.
    assert lrs[:3] == pytest.approx([0.0, peak / 2, peak])
    if scheduler.startswith("constant"):
        assert lrs[3] == pytest.approx(peak)
    else:
        assert lrs[3] < peak


def test_no_warmup_starts_at_the_peak(tiny_dir, tmp_path):
    config = small(tmp_path, steps=8, warmup_ratio=0.0, lr_scheduler="constant")
    trainer = trainer_for(config, tiny_dir)
    trainer.create_optimizer_and_scheduler(num_training_steps=config.steps)
    assert trainer.lr_scheduler.get_last_lr()[0] == pytest.approx(config.learning_rate)
