"""``conductor eval run --preset paper-constrained`` end to end on local copies in the real schemas
(the paper fixtures, with a MATH-500 copy holding the 100 listed ids) and the simulated pool: every
in-domain benchmark runs, and the report puts the paper's number beside the run's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "paper"


def test_paper_preset_runs_every_benchmark_and_reports_the_paper_column(tmp_path, monkeypatch):
    from conductor_core.cli import main
    from conductor_core.evaluate.presets import paper_reference
    from conductor_core.tasks.sources.math_sources import math500_subset_ids
    from conductor_core.workers.bundled import bundled_pool_path

    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    with (data / "math500" / "test.jsonl").open("w") as f:
        for i, uid in enumerate(math500_subset_ids("paper100")):
            row = {"problem": f"Compute {i} + {i + 1}.", "answer": str(2 * i + 1)}
            row.update(solution=f"$\\boxed{{{2 * i + 1}}}$", subject="Algebra", level=1)
            f.write(json.dumps({**row, "unique_id": uid}) + "\n")
    monkeypatch.setenv("CONDUCTOR_DATA_DIR", str(data))
    out = tmp_path / "out"
    args = ["eval", "run", "--preset", "paper-constrained", "--limit", "2"]
    main([*args, "--pool", str(bundled_pool_path()), "--baselines", "single:0", "--out", str(out)])

    for bench in ("math500", "mmlu", "rlpr", "livecodebench"):
        assert (out / bench / "records-0of1.jsonl").is_file(), bench
    report = (out / "report-0of1" / "report.md").read_text()
    assert "## Beside the paper (constrained setting)" in report
    paper = paper_reference()["constrained"]["Conductor"]["in_domain_average"]
    row = next(line for line in report.splitlines() if "in_domain_average" in line)
    assert f"| {paper:.2f} |" in row
