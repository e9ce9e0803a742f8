"""The OpenAI-compatible API with OpenAI's own Python client, against a live server on the embedded brain."""
import json

import httpx
import openai
import pytest

from tests.rtc_helpers import serve_brain

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def api(brain):
    with serve_brain(brain) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), url


def test_models_are_the_loaded_model_and_the_front_desk(api):
    client, _ = api
    assert {m.id for m in client.models.list()} == {"parley-smollm2", "parley-agent"}
    assert client.models.retrieve("parley-agent").id == "parley-agent"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4o")
    assert missing.value.body["code"] == "model_not_found"


def test_a_completion_and_the_same_completion_streamed(api):
    client, _ = api
    # the shipped adapter is a front desk: it answers from the business its system message describes
    request = dict(model="parley-smollm2", max_tokens=30, messages=[
        {"role": "system", "content": "You answer calls for Bella's Bakery, 12 Oak Street. Phone 555-0101."},
        {"role": "user", "content": "What's your phone number?"}])
    completion = client.chat.completions.create(**request)
    answer = completion.choices[0].message.content
    assert "555-0101" in answer and completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 10 and 0 < completion.usage.completion_tokens <= 30
    chunks = list(client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed.strip() == answer                      # greedy: the same reply, in pieces
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2
    assert chunks[-1].usage.completion_tokens == completion.usage.completion_tokens
    # newer clients send the system message as role "developer": the same prompt, the same reply
    as_developer = [dict(request["messages"][0], role="developer"), request["messages"][1]]
    assert client.chat.completions.create(**dict(request, messages=as_developer)).choices[0].message.content == answer


def test_a_tool_call_round_trip(api):
    client, _ = api
    messages = [{"role": "user", "content": "What's the weather like in Paris right now?"}]
    first = client.chat.completions.create(model="parley-smollm2", messages=messages, tools=[WEATHER],
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and set(arguments) == {"city"} and arguments["city"]
    streamed = list(client.chat.completions.create(model="parley-smollm2", messages=messages, tools=[WEATHER],
                                                   tool_choice="required", stream=True))
    deltas = [c.choices[0].delta for c in streamed if c.choices]
    assert not "".join(d.content or "" for d in deltas)             # the call is never streamed as text ...
    sent = [call for d in deltas for call in d.tool_calls or ()]    # ... it comes whole, then its finish reason
    assert [c.function.name for c in sent] == ["get_weather"] and json.loads(sent[0].function.arguments)["city"]
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"celsius": 21, "sky": "sunny"})}]
    second = client.chat.completions.create(model="parley-smollm2", messages=messages, tools=[WEATHER],
                                            tool_choice="none", max_tokens=40)
    reply = second.choices[0].message.content
    assert second.choices[0].message.tool_calls is None and ("21" in reply or "sunny" in reply.lower()), reply


def test_the_front_desk_answers_with_its_own_tools(api):
    client, _ = api
    completion = client.chat.completions.create(model="parley-agent", messages=[
        {"role": "user", "content": "What time do you open on Saturday?"}])
    assert "9" in completion.choices[0].message.content


def test_bad_requests_get_openais_error_object_and_the_server_goes_on(api):
    client, url = api
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert unknown.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="parley-smollm2", messages=[{"role": "robot", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="parley-agent", messages=[{"role": "user", "content": "hi"}],
                                       tools=[WEATHER])
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(model="parley-smollm2", max_tokens=100_000,
                                       messages=[{"role": "user", "content": "hi"}])
    assert too_long.value.body["code"] == "context_length_exceeded"
    raw = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", timeout=10)
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    import app.api.chat

    waiting = app.api.chat.MAX_WAITING
    app.api.chat.MAX_WAITING = 0        # as if the model had a queue already
    try:
        with pytest.raises(openai.RateLimitError) as busy:
            client.chat.completions.create(model="parley-smollm2", messages=[{"role": "user", "content": "hi"}])
        assert busy.value.response.headers["retry-after"]
    finally:
        app.api.chat.MAX_WAITING = waiting
    assert client.models.list().data   # still serving
