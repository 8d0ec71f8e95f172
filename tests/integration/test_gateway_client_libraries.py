"""Structured output (``response_format``) and the client libraries people point at the gateway:
the official ``openai`` SDK (``response_format`` json_schema and json_object, ``parse`` with a
pydantic model, streamed, the Responses API's ``text.format``), LangChain's ``ChatOpenAI``
(``invoke``, ``stream``, ``with_structured_output``) and LiteLLM (``completion`` through its
``openai/`` provider), over real HTTP on loopback against the bundled simulated pool and the
embedded scripted Conductor (offline, deterministic).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import openai
import pytest
from pydantic import BaseModel

from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")
jsonschema = pytest.importorskip("jsonschema")

QUESTION = "What is 12 + 30?"
MODEL = "conductor"
KEY = "unused"


class Ingredient(BaseModel):
    name: str
    grams: int


class Recipe(BaseModel):
    """A recipe (nested models, a list, an optional field: what pydantic schemas hold)."""

    title: str
    servings: int
    vegetarian: bool
    ingredients: list[Ingredient]
    note: str | None = None


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["answer", "confidence", "steps"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def url():
    app = create_app(
        GatewayConfig(model_name=MODEL),
        pool=load_pool(bundled_pool_path()),
        plan_source=ScriptedPlanSource(),
    )
    with running_app(app, lifespan="on") as base_url:
        yield base_url


@pytest.fixture(scope="module")
def client(url):
    with openai.OpenAI(base_url=url, api_key=KEY, max_retries=0) as c:
        yield c


def ask(**fields):
    return {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], **fields}


def json_schema_format(schema=SCHEMA, name="answer", strict=True):
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": schema, "strict": strict},
    }


# -- the openai SDK ----------------------------------------------------------------------------


def test_a_json_schema_answer_is_valid_against_the_schema(client):
    completion = client.chat.completions.create(**ask(response_format=json_schema_format()))
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    value = json.loads(choice.message.content)
    jsonschema.validate(value, SCHEMA)
    # deterministic: the same request gives the same JSON
    again = client.chat.completions.create(**ask(response_format=json_schema_format()))
    assert again.choices[0].message.content == choice.message.content


def test_a_json_object_answer_is_one_json_object(client):
    completion = client.chat.completions.create(**ask(response_format={"type": "json_object"}))
    assert isinstance(json.loads(completion.choices[0].message.content), dict)


def test_the_text_format_is_the_plain_answer(client):
    plain = client.chat.completions.create(**ask())
    text = client.chat.completions.create(**ask(response_format={"type": "text"}))
    assert text.choices[0].message.content == plain.choices[0].message.content


def test_parse_with_a_pydantic_model(client):
    # chat.completions.parse in today's SDK, under beta in older ones
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    completion = parse(**ask(response_format=Recipe))
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Recipe)
    assert parsed.ingredients and isinstance(parsed.ingredients[0], Ingredient)


def test_a_streamed_json_answer_comes_whole_after_the_check(client):
    chunks = list(
        client.chat.completions.create(**ask(response_format=json_schema_format(), stream=True))
    )
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) == 1  # not streamed as written: sent once it passed the check
    jsonschema.validate(json.loads(pieces[0]), SCHEMA)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_an_answer_that_fails_the_schema_is_a_502_naming_why(client):
    # a pattern the simulated workers do not honour: their answer fails the check
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$"}}}
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(**ask(response_format=json_schema_format(schema, "code")))
    assert err.value.status_code == 502
    body = err.value.body
    assert body["code"] == "response_format_unmet" and body["param"] == "response_format"
    assert "code" in body["message"] and "does not match" in body["message"]
    streamed = openai.OpenAI(base_url=str(client.base_url), api_key=KEY, max_retries=0)
    with pytest.raises(openai.APIError) as err:  # the stream ends with the same error
        list(
            streamed.chat.completions.create(
                **ask(response_format=json_schema_format(schema, "code"), stream=True)
            )
        )
    assert "does not match" in str(err.value)


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ({"type": "json_schema"}, "response_format.json_schema"),
        (
            {"type": "json_schema", "json_schema": {"name": "has space", "schema": {}}},
            "response_format.json_schema.name",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}},
            "response_format.json_schema.schema",
        ),
        ({"type": "xml"}, "response_format.type"),
    ],
)
def test_a_bad_response_format_is_a_400_naming_the_field(client, response_format, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**ask(response_format=response_format))
    assert err.value.body["param"] == param


def test_the_responses_api_maps_text_format(client):
    response = client.responses.parse(model=MODEL, input=QUESTION, text_format=Recipe)
    assert response.status == "completed"
    assert isinstance(response.output_parsed, Recipe)
    raw = client.responses.create(
        model=MODEL,
        input=QUESTION,
        text={"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA}},
    )
    jsonschema.validate(json.loads(raw.output_text), SCHEMA)
    as_object = client.responses.create(
        model=MODEL, input=QUESTION, text={"format": {"type": "json_object"}}
    )
    assert isinstance(json.loads(as_object.output_text), dict)


# -- LangChain -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(url):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(
        model=MODEL, base_url=url, api_key=KEY, max_retries=0, timeout=60
    )


def test_langchain_invoke_and_stream(chat_model, client):
    expected = client.chat.completions.create(**ask()).choices[0].message.content
    assert chat_model.invoke(QUESTION).content == expected
    streamed = "".join(chunk.content for chunk in chat_model.stream(QUESTION))
    assert streamed == expected


def test_langchain_with_structured_output(chat_model):
    recipe = chat_model.with_structured_output(Recipe).invoke(QUESTION)
    assert isinstance(recipe, Recipe) and recipe.ingredients
    as_dict = chat_model.with_structured_output(Recipe.model_json_schema()).invoke(QUESTION)
    assert Recipe.model_validate(as_dict).ingredients
    json_mode = chat_model.bind(response_format={"type": "json_object"}).invoke(QUESTION)
    assert isinstance(json.loads(json_mode.content), dict)


# -- LiteLLM -------------------------------------------------------------------------------------


LITELLM_SCRIPT = """
import json, sys
import litellm

url, model, key, question, response_format = json.loads(sys.argv[1])
out = []
for fmt in (None, response_format):
    extra = {} if fmt is None else {"response_format": fmt}
    response = litellm.completion(
        model="openai/" + model,
        api_base=url,
        api_key=key,
        messages=[{"role": "user", "content": question}],
        num_retries=0,
        **extra,
    )
    out.append(response.choices[0].message.content)
print(json.dumps(out))
"""


def test_litellm_completion(url, client):
    """LiteLLM in a process of its own: it leaves a logging thread and an event loop behind,
    which this suite's leak check does not allow in the test process (nor is it imported here:
    its import fetches a price list from the network)."""
    if importlib.util.find_spec("litellm") is None:
        pytest.skip("litellm is not installed (the dev extra installs it)")
    expected = client.chat.completions.create(**ask()).choices[0].message.content
    args = json.dumps([url, MODEL, KEY, QUESTION, json_schema_format()])
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # offline: its bundled prices
    done = subprocess.run(
        [sys.executable, "-c", LITELLM_SCRIPT, args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plain, structured = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain == expected
    jsonschema.validate(json.loads(structured), SCHEMA)
