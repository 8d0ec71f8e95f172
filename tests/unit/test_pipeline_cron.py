"""Recurring-run schedules as KFP reads them (``conductor_pipeline_runner/cron.py``): standard
five-field cron gets KFP's seconds field, KFP's six fields and descriptors pass, and what KFP's
parser (robfig/cron v1, as the stand-in of tests/support/kfp_standin.py parses it) would refuse is
refused first."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_pipeline_runner.cron import interval_seconds, kfp_cron
from tests.support.kfp_standin import robfig_cron_parse


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("0 2 * * *", "0 0 2 * * *"),  # 02:00 every day, not minute 2 of every hour
        ("*/15 9-17 * * MON-FRI", "0 */15 9-17 * * MON-FRI"),
        ("30 4 1,15 * ?", "0 30 4 1,15 * ?"),
        ("  0  3 * * 0 ", "0 0 3 * * 0"),
        ("15 0 2 * * *", "15 0 2 * * *"),  # KFP's own six fields, seconds first
        ("@daily", "@daily"),
        ("@every 1h30m", "@every 1h30m"),
    ],
)
def test_what_kfp_is_given(given: str, sent: str) -> None:
    assert kfp_cron(given) == sent
    assert robfig_cron_parse(sent) is None  # and KFP's parser takes it


def test_five_fields_would_be_read_shifted_by_kfp() -> None:
    """Why five fields get a seconds field: robfig v1 reads them as second..month."""
    assert robfig_cron_parse("0 2 * * *") is None  # accepted, as "minute 2 of every hour"
    assert kfp_cron("0 2 * * *").split()[2] == "2"  # the hour field holds the 2


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("", "empty"),
        ("0 2 * *", "4 fields"),
        ("0 0 0 2 * * *", "7 fields"),
        ("61 * * * *", "minute field '61': 61 is outside 0-59"),
        ("0 24 * * *", "hour field '24'"),
        ("0 0 0 * * *", None),  # six fields, all in range: accepted (below)
        ("0 0 * * 7", "day of week field '7': 7 is outside 0-6"),
        ("0 0 32 * *", "day of month field '32'"),
        ("0 0 * 13 *", "month field '13'"),
        ("0 0 * JANUARY *", "'JANUARY' is not a number"),
        ("*/0 * * * *", "step '0' is not a positive number"),
        ("5-1 * * * *", "range 5-1 ends before it starts"),
        ("@sometimes", "unknown descriptor"),
        ("@every soon", "'@every' takes a duration"),
    ],
)
def test_what_kfp_would_refuse_is_refused_naming_the_field(given: str, why: str | None) -> None:
    if why is None:
        assert kfp_cron(given) == given
        return
    with pytest.raises(ConfigError, match=why.replace("*", r"\*")):
        kfp_cron(given)
    if given.strip():
        sent = given if given.startswith("@") or len(given.split()) != 5 else f"0 {given}"
        assert robfig_cron_parse(sent) is not None  # KFP would refuse it too


def test_intervals() -> None:
    assert interval_seconds("3600") == interval_seconds(3600) == interval_seconds("1h") == 3600
    assert interval_seconds("90s") == 90 and interval_seconds("30m") == 1800
    assert interval_seconds("1d") == 86400 and interval_seconds(" 6H ") == 21600
    for bad in ("0", "1w", "soon", "-5", ""):
        with pytest.raises(ConfigError, match="--every"):
            interval_seconds(bad)
