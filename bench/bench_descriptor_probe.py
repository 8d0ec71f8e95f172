"""Can a model read worker descriptions at all? A supervised probe of descriptor mode.

Descriptor mode (``data.descriptors`` with ``adaptive.renumber``) shows each offered worker under
a random id with its one-line description, so routing a question means reading the description
that fits its domain and copying the id beside it. When GRPO does not learn that, the cause is
either the model (it cannot represent the lookup) or the learning signal (reward alone finds it
too slowly). This probe separates the two: it fine-tunes a model (``MODEL``, e.g. a tiny stage's
``warmup-model``) with cross-entropy on one-step plans that name the best offered worker for the
question's domain, shown exactly as the adaptive stage's dataset shows them
(:func:`~conductor_core.train.data.shown_workers`), and prints, every ``--eval-every`` steps, the
share of held-out questions (``test`` split, fresh random subsets and ids) whose greedy plan
(unaided: no plan grammar) names a best offered worker. The labels use the simulated skills,
which training never sees: this measures what the architecture can represent, not a training
recipe.

    .venv/bin/python bench/bench_descriptor_probe.py MODEL [--steps 3000] [--lr 1e-3]
        [--batch 16] [--eval-every 250] [--held-out 240] [--sizes 2 3] [--save DIR]

``--save DIR`` keeps the probed model, so ``bench/bench_adaptive_routing.py DIR --descriptors
[--new-worker DOMAIN]`` can check that the routing bench scores a model that does read
descriptions (and a newcomer it never saw) as such. About 4 CPU-minutes for 3000 steps of the tiny
model on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from random import Random
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_adaptive_routing import best_offered


def probe_examples(
    rng: Random, problems: list[Any], pool: Any, config: Any, count: int
) -> list[tuple[Any, list[int]]]:
    """``count`` (plan request, shown ids of the best offered workers) pairs: a random problem, a
    random subset where the offered workers differ for its domain, shown as the stage shows it."""
    from conductor_core.solve import plan_request
    from conductor_core.train.data import offered_subset, shown_workers, stage_options

    size = len(pool.workers)
    descriptions = pool.descriptions()
    out = []
    while len(out) < count:
        problem = rng.choice(problems)
        offered = offered_subset(rng, size, config.adaptive.k_min, config.adaptive.k_max)
        best = best_offered(pool, offered, problem.domain)
        if best is None:
            continue
        shown, workers, shown_desc = shown_workers(rng, config, offered, size, descriptions)
        request = plan_request(problem.question, size, stage_options(config, shown, shown_desc))
        out.append((request, [s for s, w in zip(shown, workers, strict=True) if w in best]))
    return out


def best_share(model: Any, tokenizer: Any, config: Any, held_out: list[Any]) -> float:
    """The share of ``held_out`` pairs whose greedy plan's last step names a best offered id."""
    from conductor_core.train.warmup import greedy_plans

    results = greedy_plans(model, tokenizer, config, [request for request, _ in held_out])
    hits = sum(
        r.ok and r.workflow.steps[-1].worker in best
        for r, (_, best) in zip(results, held_out, strict=True)
    )
    return hits / len(held_out)


def main(argv: list[str] | None = None) -> int:
    """Run the probe; prints the held-out share every ``--eval-every`` steps."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="the model folder to fine-tune (not modified)")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--held-out", type=int, default=240)
    parser.add_argument("--sizes", type=int, nargs=2, default=(2, 3), metavar=("K_MIN", "K_MAX"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", type=Path, help="keep the probed model in this folder")
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        parser.error(f"{args.model}: not a model folder (no config.json)")

    import torch
    from experiment import held_out_problems, learning_config
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conductor_core.train.config import WarmupSpec
    from conductor_core.train.expert_start import one_step_plan
    from conductor_core.train.grpo import load_inputs
    from conductor_core.train.warmup import encode_example, train_supervised
    from conductor_core.workflow.prompts import plan_messages, save_prompt_spec

    k_min, k_max = args.sizes
    with tempfile.TemporaryDirectory(prefix="bench-descriptor-probe-") as tmp:
        config = learning_config(
            tmp,
            stage="adaptive",
            seed=args.seed,
            extra={
                "data": {"descriptors": True},
                "adaptive": {"renumber": True, "k_min": k_min, "k_max": k_max},
            },
        )
        train, _, pool = load_inputs(config)
        test, _ = held_out_problems(config)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    held_out = probe_examples(Random(args.seed + 99), test, pool, config, args.held_out)
    examples = probe_examples(Random(args.seed), train, pool, config, args.steps * args.batch)
    encoded = [
        encode_example(
            tokenizer,
            plan_messages(request),
            one_step_plan(best[0], config.data.access_mode),
            prompt_loss=False,
        )
        for request, best in examples
    ]
    model.eval()
    print(
        f"step 0: held-out best-offered share {best_share(model, tokenizer, config, held_out):.3f}"
    )
    start = time.perf_counter()

    def report(step: int, loss: float) -> None:
        if step % args.eval_every and step != args.steps:
            return
        model.eval()
        share = best_share(model, tokenizer, config, held_out)
        model.train()
        print(
            f"step {step}: loss {loss:.4f}, held-out best-offered share {share:.3f} "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )

    spec = WarmupSpec(steps=args.steps, batch_size=args.batch, learning_rate=args.lr)
    train_supervised(model, tokenizer, encoded, spec, seed=args.seed, on_step=report)
    if args.save:
        model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
        # asked as the probe asked it: descriptor mode, the stage's prompt style and plan length
        save_prompt_spec(
            args.save,
            config.data.prompt_style,
            max_plan_tokens=config.generation.max_completion_length,
            descriptors=True,
        )
        print(f"model: {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
