"""The Great Expectations gate over curated problems.

Suites (each expectation carries a human label in its ``meta``):

* ``dataset`` on all rows: schema columns present, at least one row, non-null id/source/domain/
  question, unique ids, domain in the allowed set;
* one suite per domain present, on that domain's rows: sensible question length, and
  ``math`` reference parses with the math grader's parser, ``mcq`` has 2-26 choices and the
  reference letter names one of them, ``code`` carries at least one test, ``freeform`` has a
  non-empty reference.

Great Expectations 1.x is imported lazily (it takes seconds) and one ephemeral context is reused
for the whole process. The result is plain data (:class:`ValidationOutcome`) for the reports.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conductor_core.data.config import ExpectationsConfig
from conductor_core.data.frame import problems_frame
from conductor_core.tasks.problem import Domain, Problem

SCHEMA_COLUMNS = ["id", "source", "domain", "question", "reference", "choices", "tests", "metadata"]


@dataclass
class CheckResult:
    """One expectation's outcome."""

    suite: str
    label: str
    expectation: str
    column: str | None
    success: bool
    observed: str
    rows: int
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "suite": self.suite,
            "label": self.label,
            "expectation": self.expectation,
            "column": self.column,
            "success": self.success,
            "observed": self.observed,
            "rows": self.rows,
            "examples": self.examples,
        }


@dataclass
class ValidationOutcome:
    """All checks of a gate run."""

    checks: list[CheckResult]
    rows: int

    @property
    def success(self) -> bool:
        """True when every expectation passed."""
        return all(c.success for c in self.checks)

    @property
    def failing(self) -> list[CheckResult]:
        """The failed expectations, in suite order."""
        return [c for c in self.checks if not c.success]

    def summary(self) -> str:
        """A few lines for a terminal: pass count, then each failure with example ids."""
        passed = sum(c.success for c in self.checks)
        lines = [f"{passed}/{len(self.checks)} expectations passed on {self.rows} problems"]
        for c in self.failing:
            ids = ", ".join(str(e.get("id")) for e in c.examples) or "-"
            lines.append(f"  FAILED [{c.suite}] {c.label}: {c.observed} (e.g. {ids})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "success": self.success,
            "rows": self.rows,
            "checks": [c.to_dict() for c in self.checks],
        }


class _Gate:
    """One ephemeral GX context with a pandas dataframe asset, reused for every validation."""

    def __init__(self) -> None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.gx = gx
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(
            globally=False, metric_calculations=False
        )
        source = self.context.data_sources.add_pandas("curation")
        asset = source.add_dataframe_asset("problems")
        self.batch = asset.add_batch_definition_whole_dataframe("whole")
        self._names = itertools.count()
        self.lock = threading.Lock()

    def run(self, name: str, expectations: list, df, max_examples: int) -> list[CheckResult]:
        gx = self.gx
        uid = f"{name}-{next(self._names)}"
        suite = self.context.suites.add(gx.ExpectationSuite(name=uid))
        for e in expectations:
            suite.add_expectation(e)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=uid, data=self.batch, suite=suite)
        )
        try:
            result = definition.run(
                batch_parameters={"dataframe": df},
                result_format={
                    "result_format": "COMPLETE",
                    "unexpected_index_column_names": ["id"],
                },
            )
        finally:
            self.context.validation_definitions.delete(uid)
            self.context.suites.delete(uid)
        order = {e.meta["label"]: i for i, e in enumerate(expectations)}
        checks = [_check(name, r, len(df), max_examples) for r in result.results]
        _add_context(checks, df)
        checks.sort(key=lambda c: order.get(c.label, len(order)))
        return checks


_GATE: _Gate | None = None
_GATE_LOCK = threading.Lock()


def _gate() -> _Gate:
    global _GATE
    with _GATE_LOCK:
        if _GATE is None:
            _GATE = _Gate()
        return _GATE


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, list | dict | str):
        return value.item()
    return value


def _add_context(checks: list[CheckResult], df: Any) -> None:
    """Give each failing example the problem's reference (shortened), so a reader sees why."""
    refs = dict(zip(df["id"], df["reference"], strict=False)) if len(df) else {}
    for c in checks:
        for ex in c.examples:
            ref = refs.get(ex.get("id"))
            if isinstance(ref, str) and c.column not in ("id", "question", "question_length"):
                ex["reference"] = ref if len(ref) <= 60 else ref[:57] + "..."


def _check(suite: str, r: Any, rows: int, max_examples: int) -> CheckResult:
    cfg = r.expectation_config
    res = r.result or {}
    column = cfg.kwargs.get("column")
    examples: list[dict[str, Any]] = []
    if r.exception_info and r.exception_info.get("raised_exception"):
        observed = f"error: {r.exception_info.get('exception_message')}"
    elif "unexpected_count" in res:
        observed = f"{res['unexpected_count']} of {res.get('element_count', rows)} rows unexpected"
        for item in res.get("unexpected_index_list") or []:
            if len(examples) >= max_examples:
                break
            if isinstance(item, dict):
                ex = {"id": _plain(item.get("id"))}
                if column and column in item and column != "id":
                    ex["value"] = _plain(item[column])
                examples.append(ex)
    elif "observed_value" in res:
        value = res["observed_value"]
        details = (res.get("details") or {}).get("mismatched")
        if details and details.get("missing"):
            observed = f"missing {details['missing']}"
        elif cfg.type == "expect_table_columns_to_match_set":
            observed = f"all present among {len(value)} columns"
        else:
            observed = f"observed {_plain(value)}"
    else:
        observed = "passed" if r.success else "failed"
    return CheckResult(
        suite=suite,
        label=str(cfg.meta.get("label", cfg.type)),
        expectation=cfg.type,
        column=column,
        success=bool(r.success),
        observed=observed,
        rows=rows,
        examples=examples,
    )


def _dataset_expectations(gx: Any, config: ExpectationsConfig) -> list:
    E = gx.expectations
    out = [
        E.ExpectTableColumnsToMatchSet(
            column_set=SCHEMA_COLUMNS,
            exact_match=False,
            meta={"label": "schema columns are present"},
        ),
        E.ExpectTableRowCountToBeBetween(min_value=1, meta={"label": "at least one problem"}),
    ]
    for col in ("id", "source", "domain", "question"):
        out.append(E.ExpectColumnValuesToNotBeNull(column=col, meta={"label": f"{col} is set"}))
    out.append(E.ExpectColumnValuesToBeUnique(column="id", meta={"label": "ids are unique"}))
    out.append(
        E.ExpectColumnValuesToBeInSet(
            column="domain",
            value_set=list(config.domains),
            meta={"label": f"domain is one of {', '.join(config.domains)}"},
        )
    )
    return out


def _domain_expectations(gx: Any, domain: str, config: ExpectationsConfig) -> list:
    E = gx.expectations
    lo, hi = config.question_length.min, config.question_length.max
    out = [
        E.ExpectColumnValuesToBeBetween(
            column="question_length",
            min_value=lo,
            max_value=hi,
            meta={"label": f"question length is {lo}-{hi} characters"},
        )
    ]
    if domain == Domain.MATH:
        out.append(
            E.ExpectColumnValuesToBeInSet(
                column="reference_parses",
                value_set=[True],
                meta={"label": "math reference answer parses"},
            )
        )
    elif domain == Domain.MCQ:
        out.append(
            E.ExpectColumnValuesToBeBetween(
                column="n_choices",
                min_value=2,
                max_value=26,
                meta={"label": "mcq has 2-26 choices"},
            )
        )
        out.append(
            E.ExpectColumnValuesToBeInSet(
                column="reference_in_choices",
                value_set=[True],
                meta={"label": "mcq reference letter is among the choices"},
            )
        )
    elif domain == Domain.CODE:
        out.append(
            E.ExpectColumnValuesToBeBetween(
                column="n_tests", min_value=1, meta={"label": "code problem has at least one test"}
            )
        )
    elif domain == Domain.FREEFORM:
        out.append(
            E.ExpectColumnValuesToBeBetween(
                column="reference_length",
                min_value=1,
                meta={"label": "freeform reference is not empty"},
            )
        )
    return out


def validate(
    problems: Sequence[Problem], config: ExpectationsConfig | None = None
) -> ValidationOutcome:
    """Run the gate on ``problems``: the ``dataset`` suite, then one suite per domain present."""
    config = config or ExpectationsConfig()
    df = problems_frame(problems)
    gate = _gate()
    with gate.lock:
        checks = gate.run(
            "dataset", _dataset_expectations(gate.gx, config), df, config.max_examples
        )
        for domain in [d.value for d in Domain]:
            part = df[df["domain"] == domain].reset_index(drop=True)
            if len(part) == 0:
                continue
            exps = _domain_expectations(gate.gx, domain, config)
            checks.extend(gate.run(domain, exps, part, config.max_examples))
    return ValidationOutcome(checks=checks, rows=len(df))
