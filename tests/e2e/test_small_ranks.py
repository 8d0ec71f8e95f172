"""The ``small`` profile's GRPO (the bundled SmolLM2-135M-Instruct with LoRA adapters, on CPU)
under ``torchrun --nproc-per-node 2`` (gloo) for two steps: both ranks hold the same adapter
weights after every step, each rank generates and scores its own share of the step's plans (one
question's group of four plans spans both ranks), and rank 0 alone writes the checkpoints, the
model and the summary (``conductor_core.train.ranks``, ``grpo.rank_batch``).

What each rank holds is read by a launcher the test writes: it wraps
``conductor_core.train.grpo.make_callbacks`` with one more trainer callback, which gets each
batch the rank's reward scored from its trainer (``on_batch_scored``), hashes the trainable
parameters (sha256, in name order) at the start and after every optimiser step and writes them,
with the latest scored batch, to ``rank<N>.jsonl``, as it does each call of
``grpo._save_outputs`` (the model folder); then it runs ``conductor train``
(``conductor_core.cli.main``) unchanged.

The untrained model's 24-token plans are cut off and all score 0, and equal rewards give GRPO no
gradient: the weights would not move, and equal weights on both ranks would prove nothing. So the
launcher adds :data:`NUDGE` to the reward of the second plan each rank scores (after the real
scoring): every group's rewards differ, each rank's gradient comes from its own plans, and the
ranks stay equal only if DDP averages their gradients. The tiny model's two-rank run, with
MLflow: tests/integration/test_train_ranks.py.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conductor_core.policy.pretrained import CACHE_ENV, MODEL_NAME
from conductor_core.train.config import build_config
from conductor_core.train.grpo import rank_batch
from tests.support.bundled_model import BundledModel

pytestmark = pytest.mark.slow

STEPS = 2
WORLD = 2
NUDGE = 0.01

LAUNCHER = textwrap.dedent(
    r'''
    """`conductor train` with a callback that records, on each rank, what it holds and scored."""

    import dataclasses
    import hashlib
    import json
    import os
    import sys
    from pathlib import Path

    import torch
    from transformers import TrainerCallback

    from conductor_core import cli
    from conductor_core.train import grpo
    from conductor_core.train.reward import ConductorReward

    OUT = Path(sys.argv[1])
    NUDGE = float(sys.argv[2])
    RANK = int(os.environ["RANK"])
    make_callbacks = grpo.make_callbacks
    save_outputs = grpo._save_outputs
    score_batch = ConductorReward.score_batch


    def record(**fields):
        """One line of this rank's records."""
        with (OUT / f"rank{RANK}.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"rank": RANK, **fields}) + "\n")


    def trainable_digest(model):
        """sha256 over the trainable parameters (name, dtype, shape, bytes), in name order."""
        digest = hashlib.sha256()
        names = []
        for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if not param.requires_grad:
                continue
            names.append(name)
            tensor = param.detach().to("cpu", torch.float32).contiguous()  # exact from bf16
            digest.update(f"{name}|{param.dtype}|{tuple(tensor.shape)}".encode())
            digest.update(tensor.numpy().tobytes())
        return digest.hexdigest(), names


    class RecordRank(TrainerCallback):
        scored = None  # the latest batch the trainer handed on
        batches = 0

        def on_batch_scored(self, args, state, control, scored=None, **kwargs):
            self.scored = scored
            self.batches += 1

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            digest, names = trainable_digest(model)
            record(
                step=int(state.global_step),
                digest=digest,
                trainable=names,
                world_size=args.world_size,
                per_device_train_batch_size=args.per_device_train_batch_size,
                gradient_accumulation_steps=args.gradient_accumulation_steps,
                ddp_backend=args.ddp_backend,
            )

        def on_step_end(self, args, state, control, model=None, **kwargs):
            digest, _ = trainable_digest(model)
            scored = self.scored
            record(
                step=int(state.global_step),
                digest=digest,
                reward_calls=self.batches,
                ids=list(scored.problem_ids),
                texts=list(scored.texts),
                scored=[float(o.reward) for o in scored.outcomes],
                rewards=list(scored.rewards),
            )


    async def nudged(self, *args, **kwargs):
        """The real rewards, the second plan of this rank's batch NUDGE higher."""
        scored = await score_batch(self, *args, **kwargs)
        rewards = [r if r is None else r + NUDGE * (i % 2) for i, r in enumerate(scored.rewards)]
        return dataclasses.replace(scored, rewards=tuple(rewards))


    def recorded_callbacks(*args, **kwargs):
        return [*make_callbacks(*args, **kwargs), RecordRank()]


    def recorded_save_outputs(*args, **kwargs):
        """The final model folder (and its upload): which rank writes it."""
        record(event="model")
        return save_outputs(*args, **kwargs)


    ConductorReward.score_batch = nudged
    grpo.make_callbacks = recorded_callbacks
    grpo._save_outputs = recorded_save_outputs
    cli.main(sys.argv[3:])
    '''
)


def small_ranks_config(out: Path):
    """The small profile's base stage, cut to two steps of one question's four plans (two per
    rank, one forward pass each), short plans, a checkpoint every step, no tracking."""
    return build_config(
        {
            "output_dir": str(out),
            "steps": STEPS,
            "questions_per_step": 1,
            "plans_per_question": 4,
            "micro_batch_size": 2,
            "warmup_ratio": 0.0,  # a learning-rate warm-up would make step 1's rate 0
            "warmup": {"enabled": False},  # no format start: GRPO alone
            "generation": {"max_completion_length": 24},
            "data": {"max_problems": 8},
            "checkpoint": {"save_steps": 1},
            "tracking": {"backend": "none"},
        },
        stage="base",
        profile="small",
    )


def read_records(path: Path) -> tuple[dict[int, dict], list[str]]:
    """A rank's records by step, and the events it recorded, in order."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    steps = {r["step"]: r for r in records if "step" in r}
    return steps, [r["event"] for r in records if "event" in r]


def test_small_profile_two_ranks_hold_the_same_weights_and_rank_0_alone_writes(
    tmp_path: Path, bundled_model: BundledModel
) -> None:
    out = tmp_path / "base"
    config = small_ranks_config(out)
    assert config.model.path == MODEL_NAME and config.lora.enabled and config.device == "cpu"
    # Each rank takes half of a step's four plans in one forward pass: the question's group
    # spans both ranks (TRL gathers the rewards before it normalises them per group).
    assert rank_batch(config, WORLD) == (2, 1)
    config.to_yaml(tmp_path / "c.yaml")
    (tmp_path / "launch.py").write_text(LAUNCHER, encoding="utf-8")
    records = tmp_path / "records"
    records.mkdir()
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",  # the process group talks over loopback only
        CACHE_ENV: str(bundled_model.cache),  # both ranks load the session's converted model
        "HF_HUB_OFFLINE": "1",
    }
    started = time.perf_counter()
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run"),
            *("--standalone", "--nproc-per-node", str(WORLD)),
            *(str(tmp_path / "launch.py"), str(records), str(NUDGE)),
            *("train", "--config", str(tmp_path / "c.yaml"), "--no-progress"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=420,
    )
    seconds = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    print(f"\ntwo ranks, {STEPS} steps of the small profile: {seconds:.0f}s")

    # Every rank trained both steps and scored its own share of each step's plans.
    for rank in range(WORLD):
        line = f"rank {rank}/{WORLD}: trained {STEPS} steps, its reward scored {STEPS} batches"
        assert line in log, log[-4000:]
    assert log.count("training summary") == 1  # rank 0 prints the summary

    ranks, events = zip(
        *(read_records(records / f"rank{rank}.jsonl") for rank in range(WORLD)), strict=True
    )
    assert all(sorted(r) == list(range(STEPS + 1)) for r in ranks)
    start = ranks[0][0]
    assert start["world_size"] == WORLD and start["ddp_backend"] == "gloo"
    assert (start["per_device_train_batch_size"], start["gradient_accumulation_steps"]) == (2, 1)
    # LoRA: the adapters alone train (r x in, out x r for each of the 7 projections per layer)
    assert start["trainable"] and all(".lora_" in name for name in start["trainable"])
    assert ranks[1][0]["trainable"] == start["trainable"]

    # The same weights on both ranks at the start and after every step (the same seeded adapters,
    # DDP's broadcast; then the averaged gradients).
    for step in range(STEPS + 1):
        digests = {r[step]["digest"] for r in ranks}
        assert len(digests) == 1, f"step {step}: the ranks' adapters differ"

    logs = json.loads((out / "history.json").read_text())
    history = {int(h["step"]): h for h in logs if "reward" in h}  # not the closing summary
    for step in range(1, STEPS + 1):
        shares = [r[step] for r in ranks]
        # each rank scored its own two plans of the step's one question, once per step
        assert [s["reward_calls"] for s in shares] == [step] * WORLD
        assert all(len(s["ids"]) == len(s["texts"]) == len(s["scored"]) == 2 for s in shares)
        assert len({i for s in shares for i in s["ids"]}) == 1  # the group spans the ranks
        # its own plans: each process samples with its own seed (TRL's device-specific seed)
        assert shares[0]["texts"] != shares[1]["texts"]
        for share in shares:
            assert share["rewards"] == pytest.approx(
                [share["scored"][0], share["scored"][1] + NUDGE]
            )
        # TRL's logged reward is the mean over the group gathered from both ranks; the group's
        # rewards differ, so the step had a gradient, and the adapters moved (on both ranks alike)
        rewards = [x for s in shares for x in s["rewards"]]
        logged = history[step]
        assert logged["reward"] == pytest.approx(statistics.mean(rewards), abs=1e-6)
        # the group's spread over all four (one rank's two alone would give NUDGE / sqrt(2))
        assert logged["reward_std"] == pytest.approx(statistics.stdev(rewards), abs=1e-6)
        assert logged["grad_norm"] > 0
        assert ranks[0][step]["digest"] != ranks[0][step - 1]["digest"], f"step {step}: no move"

    # Rank 0 alone wrote the model folder (and the summary: the one summary printed above);
    # rank 1 added only its RNG state to each of rank 0's checkpoints.
    assert events == (["model"], [])
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints == [f"checkpoint-{step}" for step in range(1, STEPS + 1)]
    for name in checkpoints:
        files = {p.name for p in (out / "checkpoints" / name).iterdir()}
        assert {"adapter_model.safetensors", "trainer_state.json"} <= files
        assert {f for f in files if f.startswith("rng_state")} == {
            f"rng_state_{rank}.pth" for rank in range(WORLD)
        }
    model = out / "model"
    assert (model / "model.safetensors").is_file()  # the adapters merged into the weights
    assert not (model / "adapter_config.json").exists()
    assert (model / "conductor_prompt.json").is_file()
    assert json.loads((out / "summary.json").read_text())["steps"] == STEPS
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("model")) == ["model"]
