"""Small result types shared by the curation steps."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel

from conductor_core.tasks.problem import Problem

SOURCE_KEY = "curation_source"
"""Metadata key holding the config source name a problem was loaded from."""


class Removal(BaseModel):
    """One problem a step dropped, and why."""

    id: str
    reason: str


class Filtered(NamedTuple):
    """What a filtering step returns: the problems kept and the ones removed (with reasons)."""

    kept: list[Problem]
    removed: list[Removal]


def source_of(problem: Problem) -> str:
    """The config source name of a problem (its ``source`` field when it was not tagged)."""
    return str(problem.metadata.get(SOURCE_KEY) or problem.source)


def difficulty_of(problem: Problem) -> str:
    """A problem's difficulty label for stats (``metadata.difficulty``, else ``unknown``)."""
    value = problem.metadata.get("difficulty")
    return "unknown" if value is None or value == "" else str(value)
