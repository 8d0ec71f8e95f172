"""`conductor solve` against a worker that cannot be reached (it connects to a closed port on
loopback): a recorded failure and a non-zero exit (the embedded default:
tests/unit/test_cli_solve.py)."""

from __future__ import annotations

import pytest
import yaml

from conductor_core.cli import main


def test_unreachable_worker_is_a_recorded_failure_with_non_zero_exit(tmp_path, capsys) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        yaml.safe_dump(
            {
                "workers": [
                    {
                        "provider": "openai",
                        "model": "m",
                        "endpoint": "http://127.0.0.1:9/v1",
                        "max_retries": 1,
                    }
                ],
                "retry": {"backoff_base_s": 0.01},
            }
        )
    )
    with pytest.raises(SystemExit) as exc:
        main(["solve", "hi", "--pool", str(pool)])
    out = capsys.readouterr().out
    assert exc.value.code == 1 and "cannot reach http://127.0.0.1:9/v1" in out
    assert "infrastructure error" in out
