"""``conductor grade PROBLEMS ANSWERS``: grade answers produced elsewhere against problems."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from conductor_core.errors import ConductorError
from conductor_core.tasks.problem import read_problems


class AnswerFileError(ConductorError):
    """The answers file is unreadable or a line is not {"id": ..., "answer": ...}."""


def read_answers(path: str | Path) -> dict[str, str | None]:
    """Read an answers JSONL file: one ``{"id": ..., "answer": ...}`` per line (last one wins)."""
    path = Path(path)
    if not path.exists():
        raise AnswerFileError(f"answers file not found: {path}")
    out: dict[str, str | None] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AnswerFileError(f"{path}:{lineno}: not JSON ({exc.msg})") from exc
            if not isinstance(rec, dict) or "id" not in rec:
                raise AnswerFileError(
                    f'{path}:{lineno}: each line must be {{"id": ..., "answer": ...}}'
                )
            answer = rec.get("answer")
            out[str(rec["id"])] = None if answer is None else str(answer)
    return out


async def _grade_all(problems: list, answers: dict[str, str | None], concurrency: int) -> list:
    # lazy: conductor --help imports every command module; this adds ~32 ms
    from conductor_core.tasks.grading import agrade

    sem = asyncio.Semaphore(concurrency)

    async def one(p: Any) -> Any:
        async with sem:
            return await agrade(p, answers[p.id])

    return await asyncio.gather(*(one(p) for p in problems))


def grade_files(
    problems_path: str | Path, answers_path: str | Path, *, concurrency: int = 4
) -> dict[str, Any]:
    """Grade an answers file against a problems file; return results, summary and mismatches."""
    problems = read_problems(problems_path)
    answers = read_answers(answers_path)
    known = {p.id for p in problems}
    unknown = sorted(set(answers) - known)
    missing = [p.id for p in problems if p.id not in answers]
    graded = [p for p in problems if p.id in answers]
    verdicts = asyncio.run(_grade_all(graded, answers, concurrency))
    results = []
    per_domain: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p, v in zip(graded, verdicts, strict=True):
        results.append(
            {
                "id": p.id,
                "domain": str(p.domain),
                "correct": v.correct,
                "reason": v.reason,
                "extracted": v.extracted,
                "infra_error": v.infra_error,
            }
        )
        per_domain[str(p.domain)][1] += 1
        per_domain[str(p.domain)][0] += int(v.correct)
    n_correct = sum(r["correct"] for r in results)
    summary = {
        "problems": len(problems),
        "graded": len(results),
        "correct": n_correct,
        "accuracy": n_correct / len(results) if results else 0.0,
        "infra_errors": sum(r["infra_error"] for r in results),
        "per_domain": {
            d: {"graded": n, "correct": c, "accuracy": c / n if n else 0.0}
            for d, (c, n) in sorted(per_domain.items())
        },
        "missing_answers": len(missing),
        "unknown_ids": len(unknown),
    }
    return {"results": results, "summary": summary, "missing": missing, "unknown_ids": unknown}


def _print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="Verdicts")
    for col in ("id", "domain", "ok", "extracted", "reason"):
        table.add_column(col, overflow="fold")
    for r in report["results"]:
        mark = (
            "[green]yes[/]"
            if r["correct"]
            else ("[yellow]infra[/]" if r["infra_error"] else "[red]no[/]")
        )
        extracted = (r["extracted"] or "")[:40].replace("\n", " ")
        table.add_row(r["id"], r["domain"], mark, extracted, r["reason"][:120])
    console.print(table)
    s = report["summary"]
    console.print(
        f"accuracy {s['accuracy']:.1%} ({s['correct']}/{s['graded']} graded, "
        f"{s['problems']} problems)"
    )
    for d, ds in s["per_domain"].items():
        console.print(f"  {d}: {ds['accuracy']:.1%} ({ds['correct']}/{ds['graded']})")
    if s["infra_errors"]:
        console.print(f"[yellow]{s['infra_errors']} infrastructure failure(s) (not scored)[/]")
    if report["missing"]:
        shown = ", ".join(report["missing"][:10]) + (" ..." if len(report["missing"]) > 10 else "")
        console.print(f"[yellow]{len(report['missing'])} problem(s) without an answer:[/] {shown}")
    if report["unknown_ids"]:
        ids = report["unknown_ids"]
        shown = ", ".join(ids[:10]) + (" ..." if len(ids) > 10 else "")
        console.print(f"[yellow]{len(ids)} answer id(s) not among the problems:[/] {shown}")


@click.command("grade")
@click.argument("problems", type=click.Path(dir_okay=False))
@click.argument("answers", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Problems graded at the same time.",
)
def command(problems: str, answers: str, as_json: bool, concurrency: int) -> None:
    """Grade ANSWERS (JSONL of {"id", "answer"}) against PROBLEMS (Problem JSONL or Parquet)."""
    report = grade_files(problems, answers, concurrency=concurrency)
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_table(report)
