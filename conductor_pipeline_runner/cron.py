"""Schedules of recurring runs, in the form Kubeflow Pipelines reads them.

KFP parses a recurring run's cron with ``github.com/robfig/cron`` (v1, ``cron.Parse``): six
fields, **seconds first** (``second minute hour day-of-month month day-of-week``), the day of the
week optional, or a descriptor (``@daily``, ``@hourly``, ``@every 6h``, ...). The five-field cron
everyone writes (crontab, a Kubernetes CronJob) is therefore read shifted by one field:
``0 2 * * *``, meant as "02:00 every day", runs at minute 2 of *every hour*. :func:`kfp_cron`
takes the five-field form as standard cron and adds the seconds field, passes KFP's six-field
form and the descriptors as they are, and refuses anything KFP would refuse, before anything is
uploaded.

Intervals (``--every``) are given as ``90s``, ``30m``, ``6h``, ``1d`` or seconds
(:func:`interval_seconds`).
"""

from __future__ import annotations

import re

from conductor_core.errors import ConfigError

DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names) of the six fields robfig/cron reads
_FIELDS = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day of week", 0, 6, {d: i for i, d in enumerate(_DAYS)}),
)
_GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
_INTERVAL = re.compile(r"^(\d+)\s*([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def kfp_cron(expression: str) -> str:
    """The cron KFP is given for ``expression``: five fields (standard cron: minute hour
    day-of-month month day-of-week) get a seconds field of ``0`` in front; six fields (KFP's own
    form, seconds first) and descriptors (``@daily``, ``@every 1h30m``) are kept. Raises
    :class:`ConfigError` naming the field for anything KFP's parser would refuse."""
    text = " ".join((expression or "").split())
    if not text:
        raise ConfigError("--cron is empty; e.g. '0 2 * * *' (02:00 every day, UTC)")
    if text.startswith("@"):
        _check_descriptor(text)
        return text
    fields = text.split(" ")
    if len(fields) == 5:
        fields = ["0", *fields]
    elif len(fields) != 6:
        raise ConfigError(
            f"--cron {expression!r}: {len(fields)} fields; give standard cron (5 fields: minute "
            "hour day-of-month month day-of-week), KFP's 6 (seconds first) or a descriptor such "
            "as @daily"
        )
    for field, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        _check_field(expression, field, name, low, high, names)
    return " ".join(fields)


def _check_descriptor(text: str) -> None:
    if text.lower() in DESCRIPTORS:
        return
    if text.lower().startswith("@every "):
        duration = text[len("@every ") :].strip()
        if _GO_DURATION.match(duration):
            return
        raise ConfigError(f"--cron {text!r}: '@every' takes a duration such as 90s, 30m or 1h30m")
    raise ConfigError(
        f"--cron {text!r}: unknown descriptor; one of {', '.join(DESCRIPTORS)} or '@every 1h'"
    )


def _check_field(expression: str, field: str, name: str, low: int, high: int, names) -> None:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"--cron {expression!r}: {name} field {field!r}: {why}")

    def number(text: str) -> int:
        value = names.get(text.lower()) if names else None
        if value is None:
            if not text.isdigit():
                raise bad(f"{text!r} is not a number")
            value = int(text)
        if not low <= value <= high:
            raise bad(f"{value} is outside {low}-{high}")
        return value

    for part in field.split(","):
        span, slash, step = part.partition("/")
        if slash and (not step.isdigit() or int(step) == 0):
            raise bad(f"step {step!r} is not a positive number")
        if span in ("*", "?"):
            continue
        first, dash, last = span.partition("-")
        start = number(first)
        if dash and number(last) < start:
            raise bad(f"range {span} ends before it starts")


def interval_seconds(text: str | int) -> int:
    """Seconds of an interval given as ``3600``, ``90s``, ``30m``, ``6h`` or ``1d`` (at least 1,
    as KFP requires)."""
    match = _INTERVAL.match(str(text).strip().lower())
    if not match:
        raise ConfigError(f"--every {text!r}: give seconds or a number with s, m, h or d (6h)")
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds < 1:
        raise ConfigError(f"--every {text!r}: at least 1 second")
    return seconds
