"""``conductor solve``: plan, run and answer one question, showing each step live."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from conductor_core.api import Conductor  # what the Python API runs (docs/python.md)
from conductor_core.cli._common import conductor_options


@click.command("solve")
@click.argument("question")
@conductor_options
@click.option(
    "--rounds",
    default=1,
    show_default=True,
    type=click.IntRange(1, 5),
    help="Maximum Conductor rounds (2+ enables recursive refinement).",
)
@click.option("--max-tokens", default=None, type=int, help="Token budget per question.")
@click.option("--max-cost", default=None, type=float, help="Dollar budget per question.")
@click.option("--deadline", default=None, type=float, help="Wall-clock budget in seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the full trace as JSON only.")
def command(
    question: str,
    pool_path: Path | None,
    conductor: str,
    conductor_model: str | None,
    plan_grammar: bool,
    conductor_temperature: float | None,
    conductor_max_tokens: int | None,
    conductor_key_env: str | None,
    problems_path: Path | None,
    max_steps: int,
    access_mode: str,
    descriptors: bool,
    prompt_style: str,
    sample_index: int,
    rounds: int,
    max_tokens: int | None,
    max_cost: float | None,
    deadline: float | None,
    as_json: bool,
) -> None:
    """Plan, run and answer QUESTION on a worker pool."""
    conductor_ = Conductor(
        conductor,
        pool_path,
        model_name=conductor_model,
        api_key_env=conductor_key_env,
        plan_grammar=plan_grammar,
        temperature=conductor_temperature,
        plan_tokens=conductor_max_tokens,
        problems=problems_path,
        max_steps=max_steps,
        access_mode=access_mode,
        descriptors=descriptors,
        prompt_style=prompt_style,
        rounds=rounds,
        max_tokens=max_tokens,
        max_cost=max_cost,
        deadline=deadline,
    )
    view = None if as_json else LiveView(conductor_.pool_config)
    result = asyncio.run(_run(conductor_, question, sample_index, view))
    trace = result.trace
    if as_json:
        click.echo(json.dumps(trace.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        view.summary(trace)
        if result.grade is not None:
            g = result.grade
            mark = "[green]right[/green]" if g.correct else "[red]wrong[/red]"
            view.console.print(f"graded against {g.reference_id}'s reference: {mark} ({g.reason})")
    if trace.format_error or trace.infra_error or trace.answer is None:
        sys.exit(1)


async def _run(conductor, question, sample_index, view):
    try:
        return await conductor.asolve(
            question, seed=sample_index, on_event=view.on_event if view else None
        )
    finally:
        await conductor.aclose()


class LiveView:
    """Prints the plan, then each step as it starts and ends, then the answer and totals."""

    def __init__(self, config) -> None:
        from rich.console import Console

        self.config = config
        self.console = Console(stderr=False, highlight=False)

    def _name(self, worker: int) -> str:
        w = self.config.workers[worker]
        return f"[{worker}] {w.display_name}"

    def on_event(self, event: dict[str, Any]) -> None:
        """Render one executor or solve-loop event."""
        from rich.markup import escape

        c = self.console
        kind = event["type"]
        if kind == "plan_start":
            c.print(f"[bold]Round {event['round'] + 1}[/bold]: asking the Conductor for a plan…")
        elif kind == "plan_end":
            if event["error"]:
                err = event["error"]
                c.print(f"[red]plan rejected[/red] ({err['code']}): {escape(err['message'])}")
            elif not event["plan"]["model_id"]:
                c.print("The Conductor keeps the previous answer (empty plan).")
            else:
                self._print_plan(event["plan"])
        elif kind == "step_start":
            sees = ", ".join(map(str, event["visible"])) or "nothing"
            c.print(
                f"  ▶ step {event['index']} on {escape(self._name(event['worker']))} (sees: {sees})"
            )
        elif kind == "step_end":
            s = event["step"]
            if s["error"]:
                c.print(f"  ✗ step {s['index']} failed: {s['error_kind']}: {escape(s['error'])}")
            else:
                preview = " ".join((s["response"] or "").split())[:100]
                c.print(
                    f"  ✓ step {s['index']} {s['latency_s']:.2f}s "
                    f"{s['input_tokens']}+{s['output_tokens']} tok: {escape(preview)}"
                )
        elif kind == "step_skipped":
            c.print(f"  – step {event['index']} skipped ({event['reason']})")

    def _print_plan(self, plan: dict[str, Any]) -> None:
        from rich.table import Table

        table = Table(title="Plan", show_lines=False)
        table.add_column("step")
        table.add_column("worker")
        table.add_column("access")
        table.add_column("subtask", overflow="fold")
        for i, (w, sub, acc) in enumerate(
            zip(plan["model_id"], plan["subtasks"], plan["access_list"], strict=True)
        ):
            table.add_row(str(i), str(w), json.dumps(acc), sub)
        self.console.print(table)

    def summary(self, trace) -> None:
        """Print the answer and the totals."""
        from rich.markup import escape
        from rich.panel import Panel

        if trace.format_error:
            self.console.print("[red]No answer: the Conductor's plan did not parse.[/red]")
        elif trace.infra_error:
            self.console.print("[red]No answer: a worker failed (infrastructure error).[/red]")
        else:
            self.console.print(Panel(escape(trace.answer or "(empty)"), title="Answer"))
        self.console.print(
            f"rounds {len(trace.rounds)} · calls {trace.calls} · tokens "
            f"{trace.input_tokens}+{trace.output_tokens} · cost ${trace.cost:.4f} · "
            f"wall {trace.wall_s:.2f}s"
        )
