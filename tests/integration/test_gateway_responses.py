"""OpenAI's Responses API on the gateway (``POST /v1/responses``, text only), driven by the
official ``openai`` client's ``responses.create`` as the OpenAI Agents SDK does, over real HTTP
on loopback: the same answer as the chat completion it stands for, streamed or not, and what it
cannot do refused by name."""

from __future__ import annotations

import openai
import pytest

from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")

QUESTION = "What is 12 + 30?"


@pytest.fixture(scope="module")
def client():
    app = create_app(
        GatewayConfig(), pool=load_pool(bundled_pool_path()), plan_source=ScriptedPlanSource()
    )
    with (
        running_app(app, lifespan="on") as url,
        openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as c,
    ):
        yield c


def test_a_response_holds_the_chat_completions_answer(client):
    chat = client.chat.completions.create(
        model="conductor", messages=[{"role": "user", "content": QUESTION}]
    )
    response = client.responses.create(model="conductor", input=QUESTION)
    assert response.status == "completed" and response.id.startswith("resp_")
    assert response.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    as_messages = client.responses.create(
        model="conductor",
        instructions="Answer briefly.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}],
    )
    assert as_messages.output_text  # a system turn and text parts are read as the chat path


def test_a_streamed_response_sends_the_answer_as_deltas_then_the_whole_response(client):
    whole = client.responses.create(model="conductor", input=QUESTION).output_text
    events = list(client.responses.create(model="conductor", input=QUESTION, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole == events[-1].response.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.usage.total_tokens > 0


def test_max_output_tokens_makes_an_incomplete_response(client):
    response = client.responses.create(model="conductor", input=QUESTION, max_output_tokens=1)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert len(response.output_text.split()) == 1


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ],
)
def test_what_a_conductor_cannot_do_is_refused_by_name(client, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="conductor", input=QUESTION, **fields)
    assert err.value.body["param"] == param
    assert err.value.body["code"] == "unsupported_parameter"


def test_the_legacy_completions_api_asks_the_prompt_as_the_question(client):
    chat = client.chat.completions.create(
        model="conductor", messages=[{"role": "user", "content": QUESTION}]
    )
    completion = client.completions.create(model="conductor", prompt=QUESTION)
    assert completion.object == "text_completion"
    assert completion.choices[0].text == chat.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model="conductor", prompt=QUESTION, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == completion.choices[0].text
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="conductor", prompt=QUESTION, echo=True)
    assert err.value.body["param"] == "echo"
