"""Reports of an evaluation: Markdown and HTML (both render in the Kubeflow UI) and PNG plots."""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from conductor_core.evaluate.aggregate import OVERALL, Summary, aggregate
from conductor_core.evaluate.presets import IN_DOMAIN, paper_reference
from conductor_core.evaluate.records import EvalRecord, dedupe


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def accuracy_table(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """The paper-shaped table: benchmarks as columns, methods as rows, mean +- s.e. (percent)."""
    header = ["method", *summary.benchmarks, OVERALL]
    rows = []
    for m in summary.methods:
        cells = [m]
        for b in [*summary.benchmarks, OVERALL]:
            try:
                s = summary.get(m, b)
                cells.append(f"{_pct(s.accuracy)} ± {_pct(s.stderr)}")
            except KeyError:
                cells.append("–")
        rows.append(cells)
    return header, rows


def _paper_method(method: str, names: dict[str, dict[str, float]]) -> str | None:
    if method.startswith("conductor"):
        return "Conductor"
    if method.startswith("moa"):
        return "MoA" if "MoA" in names else None
    label = method.split(":", 1)[-1]
    return label if label in names else None


def paper_table(summary: Summary, setting: str) -> tuple[list[str], list[list[str]]]:
    """The run's accuracy beside the paper's (``resources/eval/paper_reference.yaml``) for the
    same setting: one row per (method, benchmark) the paper reports, with the difference in
    points. ``average`` and ``in_domain_average`` are means over the run's benchmarks."""
    ref = paper_reference().get(setting, {})
    header = ["method", "benchmark", "run", "paper", "difference"]
    rows = []
    for m in summary.methods:
        paper_m = _paper_method(m, ref)
        if paper_m is None:
            continue
        accs = {}
        for b in summary.benchmarks:
            try:
                accs[b] = 100 * summary.get(m, b).accuracy
            except KeyError:
                continue
        if accs:
            accs["average"] = sum(accs.values()) / len(accs)
        dom = [accs[b] for b in IN_DOMAIN if b in accs]
        if dom:
            accs["in_domain_average"] = sum(dom) / len(dom)
        for b, paper in ref[paper_m].items():
            run = accs.get(b)
            cells = [m, b, "–" if run is None else f"{run:.2f}", f"{paper:.2f}"]
            cells.append("–" if run is None else f"{run - paper:+.2f}")
            rows.append(cells)
    return header, rows


def cost_table(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """Tokens, dollars and calls per question, plan shape and failure rates, per method."""
    header = [
        "method",
        "calls/q",
        "tokens/q",
        "$/q",
        "mean plan length",
        "'all' access",
        "format errors",
        "infra failures",
        "wall s/q",
    ]
    rows = []
    for m in summary.methods:
        s = summary.get(m)
        lengths = s.plan_lengths
        mean_len = sum(k * v for k, v in lengths.items()) / max(1, sum(lengths.values()))
        rows.append(
            [
                m,
                f"{s.calls_per_question:.2f}",
                f"{s.tokens_per_question:,.0f}",
                f"{s.cost_per_question:.5f}",
                f"{mean_len:.2f}",
                f"{100 * s.all_access_share:.1f}%",
                f"{100 * s.format_error_rate:.1f}%",
                f"{100 * s.infra_failure_rate:.1f}%",
                f"{s.wall_s_per_question:.3f}",
            ]
        )
    return header, rows


def usage_table(summary: Summary, worker_names: list[str] | None = None):
    """Share of calls going to each worker, per method."""
    workers = sorted({w for m in summary.methods for w in summary.get(m).worker_share})
    names = [
        worker_names[w] if worker_names and w < len(worker_names) else f"worker {w}"
        for w in workers
    ]
    header = ["method", *names]
    rows = [
        [m, *(f"{100 * summary.get(m).worker_share.get(w, 0.0):.1f}%" for w in workers)]
        for m in summary.methods
    ]
    return header, rows


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_markdown(
    summary: Summary,
    title: str = "Evaluation",
    worker_names=None,
    plots: list[str] | None = None,
    paper_setting: str | None = None,
) -> str:
    """The whole report as Markdown."""
    parts = [
        f"# {title}",
        "",
        "## Accuracy (%; mean ± standard error over repeats)",
        "",
        _md(*accuracy_table(summary)),
        "",
        *(
            [
                f"## Beside the paper ({paper_setting} setting)",
                "",
                _md(*paper_table(summary, paper_setting)),
                "",
            ]
            if paper_setting
            else []
        ),
        "## Cost per question",
        "",
        _md(*cost_table(summary)),
        "",
        "## Worker usage (share of calls)",
        "",
        _md(*usage_table(summary, worker_names)),
        "",
    ]
    for p in plots or []:
        parts += [f"![{Path(p).stem}]({Path(p).name})", ""]
    return "\n".join(parts)


def render_html(
    summary: Summary,
    title: str = "Evaluation",
    worker_names=None,
    plots: list[str] | None = None,
    paper_setting: str | None = None,
) -> str:
    """The whole report as a self-contained HTML page (plots embedded as data URIs)."""
    import base64

    imgs = "".join(
        f'<img alt="{html.escape(Path(p).stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(Path(p).read_bytes()).decode()}"/>'
        for p in plots or []
        if Path(p).exists()
    )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:48%;margin:4px}"
    )
    paper = (
        f"<h2>Beside the paper ({html.escape(paper_setting)} setting)</h2>"
        f"{_html_table(*paper_table(summary, paper_setting))}"
        if paper_setting
        else ""
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        "<h2>Accuracy (%; mean ± standard error over repeats)</h2>"
        f"{_html_table(*accuracy_table(summary))}{paper}<h2>Cost per question</h2>"
        f"{_html_table(*cost_table(summary))}<h2>Worker usage (share of calls)</h2>"
        f"{_html_table(*usage_table(summary, worker_names))}{imgs}</body></html>"
    )


def make_plots(summary: Summary, out_dir: str | Path, worker_names=None) -> list[str]:
    """Accuracy vs cost per method, per-benchmark bars, worker usage. Returns the PNG paths.

    Drawn on :class:`matplotlib.figure.Figure` objects, not through pyplot: the caller's backend
    (a notebook's inline one) is left as it was, and any thread may draw."""
    from matplotlib.figure import Figure

    def subplots(figsize: tuple[float, float]):
        fig = Figure(figsize=figsize)
        return fig, fig.subplots()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = subplots((6, 4))
    for m in summary.methods:
        s = summary.get(m)
        ax.errorbar(s.cost_per_question, 100 * s.accuracy, yerr=100 * s.stderr, fmt="o")
        ax.annotate(
            m,
            (s.cost_per_question, 100 * s.accuracy),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.set_xlabel("$ per question")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy vs cost")
    paths.append(_save(fig, out / "accuracy_vs_cost.png"))

    fig, ax = subplots((max(6, 1.5 * len(summary.benchmarks)), 4))
    width = 0.8 / max(1, len(summary.methods))
    for i, m in enumerate(summary.methods):
        xs, ys, es = [], [], []
        for j, b in enumerate(summary.benchmarks):
            try:
                s = summary.get(m, b)
            except KeyError:
                continue
            xs.append(j + i * width)
            ys.append(100 * s.accuracy)
            es.append(100 * s.stderr)
        ax.bar(xs, ys, width, yerr=es, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(summary.benchmarks))])
    ax.set_xticklabels(summary.benchmarks, fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.legend(fontsize=6)
    ax.set_title("Accuracy per benchmark")
    paths.append(_save(fig, out / "accuracy_per_benchmark.png"))

    header, rows = usage_table(summary, worker_names)
    fig, ax = subplots((6, 0.4 * len(rows) + 1.5))
    left = [0.0] * len(rows)
    for k, name in enumerate(header[1:]):
        vals = [float(r[k + 1].rstrip("%")) for r in rows]
        ax.barh([r[0] for r in rows], vals, left=left, label=name)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlabel("share of calls (%)")
    ax.legend(fontsize=6)
    ax.set_title("Worker usage")
    paths.append(_save(fig, out / "worker_usage.png"))
    return paths


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)


def write_report(
    summary: Summary,
    out_dir: str | Path,
    *,
    title: str = "Evaluation",
    worker_names: list[str] | None = None,
    paper_setting: str | None = None,
) -> dict[str, str]:
    """Write report.md, report.html, summary.json and the plots into ``out_dir``; with
    ``paper_setting`` (``unconstrained`` or ``constrained``) the reports show the paper's numbers
    beside the run's."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(summary, out, worker_names)
    (out / "report.md").write_text(
        render_markdown(summary, title, worker_names, plots, paper_setting)
    )
    (out / "report.html").write_text(
        render_html(summary, title, worker_names, plots, paper_setting)
    )
    (out / "summary.json").write_text(summary.model_dump_json(indent=2))
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "summary": str(out / "summary.json"),
        "plots": ",".join(plots),
    }


@dataclass
class AggregateReport:
    """What :func:`aggregate_report` made of a set of records."""

    records: list[EvalRecord]
    """The records aggregated: one per (method, problem, repeat), the last one of each."""
    summary: Summary
    paths: dict[str, str]
    """The report's files, as :func:`write_report` returns them."""


def aggregate_report(
    records: Iterable[EvalRecord],
    out_dir: str | Path,
    *,
    title: str = "Evaluation",
    worker_names: list[str] | None = None,
    paper_setting: str | None = None,
) -> AggregateReport:
    """Records -> figures -> report, the one path every evaluation takes (a shard, a preset,
    ``conductor eval aggregate``, the pipeline's aggregate step).

    The records are de-duplicated by key (method, problem id, repeat; the last one wins, as a
    re-run of an infrastructure failure is appended after it), aggregated, and the report is
    written into ``out_dir`` (see :func:`write_report`). The returned records are the
    de-duplicated ones: log those (per-problem table, traces), so that what MLflow shows counts
    what the figures count. No records make an empty report.
    """
    kept = dedupe(records)
    summary = aggregate(kept)
    paths = write_report(
        summary, out_dir, title=title, worker_names=worker_names, paper_setting=paper_setting
    )
    return AggregateReport(records=kept, summary=summary, paths=paths)
