"""``conductor pipeline run --local --no-cache``: KFP's local runner starts with its task cache off,
the run's record says so, and the run cannot be resumed (the run itself, with the cache on, is
tests/e2e/test_pipeline_local.py's; killed and resumed, tests/integration/
test_pipeline_resume.py's)."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError


class _Stop(Exception):
    """Ends the run where KFP's local runner would start."""


@pytest.mark.parametrize("caching", [True, False], ids=["default", "no-cache"])
def test_the_local_runner_gets_the_cache_switch(tmp_path, monkeypatch, caching) -> None:
    import kfp.local

    from conductor_pipeline_runner.local import run_local
    from conductor_pipeline_runner.local_resume import find_record

    seen: dict = {}

    def init(**kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(kfp.local, "init", init)
    said: list[str] = []
    with pytest.raises(_Stop):
        run_local("curation", root=tmp_path, caching=caching, echo=said.append)
    record = find_record(tmp_path, "curation")
    assert seen["enable_caching"] is caching and record.caching is caching
    assert seen["cache_root"] == str(record.cache_root(tmp_path))
    if caching:
        assert "if it is killed: the same command with --resume" in said[0]
        return
    assert "--no-cache keeps no finished task to reuse" in said[0]
    with pytest.raises(ConfigError, match="ran with --no-cache"):
        run_local("curation", root=tmp_path, resume=True, echo=said.append)


def test_no_cache_and_resume_together_are_refused(tmp_path, capsys) -> None:
    from conductor_core.cli import main

    with pytest.raises(SystemExit) as info:
        main(
            [
                "pipeline",
                "run",
                "curation",
                "--local",
                "--root",
                str(tmp_path),
                "--no-cache",
                "--resume",
            ]
        )
    assert info.value.code == 2
    assert "--no-cache and --resume do not go together" in capsys.readouterr().err
    assert not (tmp_path / "local-runs").exists()
