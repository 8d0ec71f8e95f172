"""Structured output below the gateway: the check of an answer (serve/structured.py), the JSON a
simulated worker writes for a schema, how the pool asks a worker for a format (natively or in
words; its own cache key), the executor asking only the last step, and the providers' requests."""

from __future__ import annotations

import asyncio
import json
import sys
from random import Random

import pytest
from pydantic import BaseModel

from conductor_core.serve.protocol import RequestError, ResponseFormat
from conductor_core.serve.structured import answer_problem, check_answer, output_format_of, unfenced
from conductor_core.simulation.json_answers import json_answer
from conductor_core.workers.cache import cache_key
from conductor_core.workers.config import PoolConfig, WorkerConfig
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.types import Completion, OutputFormat
from conductor_core.workflow.executor import execute
from conductor_core.workflow.model import ALL, Step, Workflow

jsonschema = pytest.importorskip("jsonschema")


class Point(BaseModel):
    x: float
    y: float


class Shape(BaseModel):
    name: str
    sides: int
    closed: bool
    points: list[Point]
    kind: str | None = None
    tags: dict[str, str] = {}


SCHEMAS = [
    Shape.model_json_schema(),
    {"type": "array", "items": {"type": "integer", "minimum": 3, "maximum": 5}, "minItems": 2},
    {"type": "string", "minLength": 80, "maxLength": 90},
    {"enum": ["red", "green"]},
    {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 10}]},
    {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}]},
    {"type": "object", "properties": {"next": {"$ref": "#"}}},  # recursive
    {},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_simulated_json_answer_is_valid_against_its_schema(schema):
    fmt = OutputFormat(type="json_schema", schema=schema)
    text = json_answer(fmt, "The answer is 42.", Random(7))
    jsonschema.validate(json.loads(text), schema)
    assert json_answer(fmt, "The answer is 42.", Random(7)) == text  # deterministic
    assert answer_problem(text, fmt) is None


def test_the_check_says_why_an_answer_fails():
    obj = OutputFormat(type="json_object")
    assert answer_problem('{"a": 1}', obj) is None
    assert "not JSON" in answer_problem("The answer is 42.", obj)
    assert "not an object" in answer_problem("[1, 2]", obj)
    fmt = OutputFormat(type="json_schema", schema=Shape.model_json_schema(), name="shape")
    assert "sides" in answer_problem('{"name": "a"}', fmt)
    with pytest.raises(RequestError) as err:
        check_answer('{"name": "a"}', fmt, "sim-math")
    assert err.value.status == 502 and err.value.code == "response_format_unmet"
    assert "sim-math" in err.value.message and "'shape'" in err.value.message


def test_a_code_fence_and_whitespace_around_the_answer_are_dropped():
    assert unfenced('\n```json\n{"a": 1}\n```\n') == '{"a": 1}'
    assert unfenced('```\n{"a": 1}```') == '{"a": 1}'
    assert unfenced('{"a": "```"}') == '{"a": "```"}'


def test_a_schema_that_is_no_json_schema_is_a_400():
    fmt = ResponseFormat.model_validate(
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "thing"}}}
    )
    with pytest.raises(RequestError) as err:
        output_format_of(fmt)
    assert err.value.status == 400 and err.value.param == "response_format.json_schema.schema"
    assert output_format_of(ResponseFormat(type="text")) is None


def test_without_jsonschema_a_json_schema_format_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    fmt = ResponseFormat.model_validate(
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    )
    with pytest.raises(RequestError) as err:
        output_format_of(fmt)
    assert err.value.status == 400 and err.value.code == "unsupported_parameter"
    assert "jsonschema" in err.value.message
    assert output_format_of(ResponseFormat(type="json_object")) is not None


class Recorder:
    """A provider that records what it was asked."""

    def __init__(self, native: bool) -> None:
        if native:
            self.accepts_output_format = True
        self.calls: list[tuple[list[dict[str, str]], dict]] = []

    async def complete(self, messages, *, sample_index=0, **kw):
        self.calls.append((messages, kw))
        return Completion(text='{"answer": "4"}')

    async def aclose(self):
        return None


def pool_of(*providers):
    workers = [
        WorkerConfig(name=f"w{i}", provider="simulated", model=f"m{i}")
        for i in range(len(providers))
    ]
    return WorkerPool(PoolConfig(workers=workers), providers=list(providers))


def test_the_pool_asks_natively_or_in_words():
    native, plain = Recorder(native=True), Recorder(native=False)
    fmt = OutputFormat(type="json_schema", schema={"type": "object"}, name="a")
    pool = pool_of(native, plain)

    async def go():
        await pool.call(0, [{"role": "user", "content": "q"}], output_format=fmt)
        await pool.call(1, [{"role": "user", "content": "q"}], output_format=fmt)
        await pool.call(1, [{"role": "user", "content": "q"}])

    asyncio.run(go())
    assert native.calls[0] == ([{"role": "user", "content": "q"}], {"output_format": fmt})
    asked, kw = plain.calls[0]
    assert kw == {} and asked[0]["role"] == "system" and "JSON Schema" in asked[0]["content"]
    assert plain.calls[1] == ([{"role": "user", "content": "q"}], {})


def test_a_format_has_its_own_cache_key():
    worker = WorkerConfig(name="w", provider="simulated", model="m")
    messages = [{"role": "user", "content": "q"}]
    plain = cache_key(worker, messages)
    assert cache_key(worker, messages, 0, None) == plain
    assert cache_key(worker, messages, 0, OutputFormat(type="json_object")) != plain


def test_only_the_last_step_is_asked_for_the_format():
    recorder = Recorder(native=True)
    pool = pool_of(recorder)
    plan = Workflow(
        steps=(
            Step(worker=0, subtask="solve it", access=()),
            Step(worker=0, subtask="write the final answer", access=ALL),
        )
    )
    fmt = OutputFormat(type="json_object")
    trace = asyncio.run(execute(plan, "What is 2 + 2?", pool, answer_format=fmt))
    assert trace.answer == '{"answer": "4"}'
    assert [kw for _, kw in recorder.calls] == [{}, {"output_format": fmt}]


def test_providers_send_the_format():
    from conductor_core.workers.providers import gemini_provider, openai_compat

    worker = WorkerConfig(name="w", provider="openai", model="m", endpoint="http://x/v1")
    fmt = OutputFormat(type="json_schema", schema={"type": "object"}, name="a", strict=True)
    request = openai_compat.build_request(worker, [{"role": "user", "content": "q"}], fmt)
    assert request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "a", "schema": {"type": "object"}, "strict": True},
    }
    assert "response_format" not in openai_compat.build_request(worker, [])
    config = gemini_provider.build_request(worker, [], fmt)["config"]
    assert config["response_mime_type"] == "application/json"
    assert config["response_json_schema"] == {"type": "object"}
