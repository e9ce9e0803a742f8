"""The Realtime API (/v1/realtime) with OpenAI's own client, against a live server on the bundled models:
spoken questions in the bundled voice, answered in audio; barge-in; the client's tools; bad events."""
import asyncio
import base64
import json
import time

import numpy as np
import openai
import pytest

from speech.audio import mulaw_to_pcm, pcm_to_mulaw, resample
from tests.rtc_helpers import serve_brain

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather now in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def server(transcriber, synthesizer, brain):
    with serve_brain(brain, transcriber, synthesizer) as url:
        yield url


@pytest.fixture(scope="module")
def voice(synthesizer):
    """voice(text, rate) -> int16 speech in the bundled voice at `rate`."""
    return lambda text, rate: resample(synthesizer.synthesize(text), synthesizer.sample_rate_hz, rate)


def connect(url: str, model: str):
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    return client.realtime.connect(model=model)


async def events_until(connection, kind: str, seen: list | None = None, timeout_s: float = TIMEOUT_S):
    """Receive events (appended to `seen`) until one of type `kind`; returns it."""
    seen = [] if seen is None else seen
    deadline = time.monotonic() + timeout_s
    while True:
        event = await asyncio.wait_for(connection.recv(), deadline - time.monotonic())
        seen.append(event)
        if event.type == kind:
            return event


async def say(connection, audio: np.ndarray, chunk_ms: int = 100, rate: int = 24_000, mulaw: bool = False) -> None:
    step = rate * chunk_ms // 1000
    for i in range(0, len(audio), step):
        chunk = audio[i:i + step]
        data = pcm_to_mulaw(chunk) if mulaw else chunk.astype("<i2").tobytes()
        await connection.input_audio_buffer.append(audio=base64.b64encode(data).decode())


def silence(ms: int, rate: int = 24_000) -> np.ndarray:
    return np.zeros(rate * ms // 1000, np.int16)


def test_a_spoken_question_is_answered_aloud_and_a_barge_in_cancels_the_answer(server, voice):
    async def call():
        async with connect(server, "parley-agent") as connection:
            created = await events_until(connection, "session.created")
            assert created.session.audio.input.turn_detection.type == "server_vad"
            await say(connection, np.concatenate([voice("What time do you open on Saturday?", 24_000),
                                                  silence(1500)]))
            first: list = []
            await events_until(connection, "response.done", first)
            # the barge-in: a second question, interrupted by speech once its answer is heard
            await say(connection, np.concatenate([voice("And where are you located?", 24_000), silence(1500)]))
            second: list = []
            await events_until(connection, "response.output_audio.delta", second)
            await asyncio.sleep(0.3)
            await say(connection, np.concatenate([voice("Sorry, one more thing.", 24_000), silence(300)]))
            await events_until(connection, "response.done", second)
            item = next(e.item for e in second if e.type == "response.output_item.added")
            await connection.conversation.item.truncate(item_id=item.id, content_index=0, audio_end_ms=200)
            truncated = await events_until(connection, "conversation.item.truncated", second)
            return first, second, truncated

    first, second, truncated = asyncio.run(call())
    kinds = [e.type for e in first]
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
             "input_audio_buffer.committed", "conversation.item.input_audio_transcription.completed",
             "response.created", "response.output_item.added", "response.content_part.added",
             "response.output_audio.delta", "response.output_audio.done", "response.output_audio_transcript.done",
             "response.content_part.done", "response.output_item.done", "response.done"]
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order), kinds
    heard = next(e for e in first if e.type == "conversation.item.input_audio_transcription.completed")
    assert "saturday" in heard.transcript.lower()
    audio = b"".join(base64.b64decode(e.delta) for e in first if e.type == "response.output_audio.delta")
    assert len(audio) / 2 / 24_000 > 0.5                                   # pcm16 at 24 kHz: half a second or more
    samples = np.frombuffer(audio, "<i2")
    assert np.abs(samples).max() > 2000                                    # speech, not silence
    deltas = "".join(e.delta for e in first if e.type == "response.output_audio_transcript.delta")
    done = next(e for e in first if e.type == "response.output_audio_transcript.done")
    assert deltas == done.transcript and done.transcript.strip()
    response = first[-1].response
    assert response.status == "completed" and response.usage.output_tokens > 0
    assert response.output[0].content[0].transcript == done.transcript

    started = [i for i, e in enumerate(second) if e.type == "input_audio_buffer.speech_started"]
    cancelled = second[-2] if second[-1].type == "conversation.item.truncated" else second[-1]
    cancelled = next(e for e in second if e.type == "response.done")
    assert cancelled.response.status == "cancelled" and cancelled.response.status_details.reason == "turn_detected"
    assert len(started) == 2 and started[1] < second.index(cancelled)
    assert truncated.item_id == cancelled.response.output[0].id and truncated.audio_end_ms == 200


def test_the_loaded_model_calls_the_clients_tool_and_speaks_its_output(server):
    async def call():
        async with connect(server, "parley-smollm2") as connection:
            await events_until(connection, "session.created")
            await connection.session.update(session={"type": "realtime", "tools": [WEATHER],
                                                     "tool_choice": {"type": "function", "name": "get_weather"}})
            await events_until(connection, "session.updated")
            await connection.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What's the weather like in Paris right now?"}]})
            await connection.response.create()
            asked: list = []
            await events_until(connection, "response.done", asked)
            call_item = asked[-1].response.output[-1]
            await connection.conversation.item.create(item={
                "type": "function_call_output", "call_id": call_item.call_id,
                "output": json.dumps({"celsius": 21, "sky": "sunny"})})
            await connection.session.update(session={"type": "realtime", "tool_choice": "none"})
            await connection.response.create()
            answered: list = []
            await events_until(connection, "response.done", answered)
            return asked, answered

    asked, answered = asyncio.run(call())
    call_done = next(e for e in asked if e.type == "response.function_call_arguments.done")
    assert call_done.name == "get_weather" and json.loads(call_done.arguments)["city"]
    assert asked[-1].response.output[-1].type == "function_call"
    assert not [e for e in asked if e.type == "response.output_audio.delta"]   # a call, not speech
    spoken = next(e for e in answered if e.type == "response.output_audio_transcript.done").transcript
    assert "21" in spoken or "sunny" in spoken.lower(), spoken
    assert [e for e in answered if e.type == "response.output_audio.delta"]


def user_text(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_text_only_responses_and_a_responses_own_settings(server):
    bakery = "You answer calls for Bella's Bakery, 12 Oak Street. Phone 555-0101."
    dentist = "You answer calls for Hill Dental, 48 Elm Road. Phone 555-0123."

    async def ask(session: dict, response: dict | None):
        async with connect(server, "parley-smollm2") as connection:
            await events_until(connection, "session.created")
            await connection.session.update(session=dict(session, type="realtime"))
            updated = await events_until(connection, "session.updated")
            await connection.conversation.item.create(item=user_text("What's your phone number?"))
            await connection.response.create(**({"response": response} if response else {}))
            seen: list = []
            await events_until(connection, "response.done", seen)
            return updated, seen

    updated, written = asyncio.run(ask({"output_modalities": ["text"], "instructions": bakery}, None))
    assert updated.session.output_modalities == ["text"]
    kinds = [e.type for e in written]
    assert "response.output_audio.delta" not in kinds and "response.output_audio_transcript.delta" not in kinds
    text = next(e for e in written if e.type == "response.output_text.done").text
    assert "".join(e.delta for e in written if e.type == "response.output_text.delta") == text
    assert "555-0101" in text, text
    response = written[-1].response
    assert response.status == "completed" and response.output_modalities == ["text"]
    assert response.output[0].content[0].type == "output_text" and response.output[0].content[0].text == text

    # a response of its own: spoken, under its own instructions, in a session set for text and the bakery
    _, spoken = asyncio.run(ask({"output_modalities": ["text"], "instructions": bakery},
                                {"output_modalities": ["audio"], "instructions": dentist, "metadata": {"n": "1"}}))
    transcript = next(e for e in spoken if e.type == "response.output_audio_transcript.done").transcript
    assert "555-0123" in transcript, transcript
    assert [e for e in spoken if e.type == "response.output_audio.delta"]
    assert spoken[-1].response.output_modalities == ["audio"] and spoken[-1].response.metadata == {"n": "1"}


def test_items_are_retrieved_and_deleted_and_the_model_forgets_them(server):
    """A deleted item leaves what the model reads: with the question and its answer deleted, asking again is the
    same prompt (the same input tokens) and the same reply as the first time."""
    async def call():
        async with connect(server, "parley-smollm2") as connection:
            await events_until(connection, "session.created")
            await connection.session.update(session={
                "type": "realtime", "output_modalities": ["text"],
                "instructions": "You answer calls for Bella's Bakery, 12 Oak Street. Phone 555-0101."})
            await events_until(connection, "session.updated")
            await connection.conversation.item.create(item=user_text("My name is Ana and my order is late."))
            aside = (await events_until(connection, "conversation.item.added")).item
            await connection.conversation.item.retrieve(item_id=aside.id)
            retrieved = await events_until(connection, "conversation.item.retrieved")
            await connection.conversation.item.delete(item_id=aside.id)
            deleted = await events_until(connection, "conversation.item.deleted")
            await connection.conversation.item.retrieve(item_id=aside.id)
            gone = await events_until(connection, "error")
            answers = []
            for _ in range(2):
                await connection.conversation.item.create(item=user_text("What's your phone number?"))
                question = (await events_until(connection, "conversation.item.added")).item
                await connection.response.create()
                answers.append(await events_until(connection, "response.done"))
                for item_id in (question.id, answers[-1].response.output[0].id):
                    await connection.conversation.item.delete(item_id=item_id)
                    await events_until(connection, "conversation.item.deleted")
            return retrieved, deleted, gone, answers

    retrieved, deleted, gone, answers = asyncio.run(call())
    assert retrieved.item.content[0].text == "My name is Ana and my order is late."
    assert deleted.item_id == retrieved.item.id and gone.error.code == "item_not_found"
    first, second = (a.response for a in answers)
    assert first.usage.input_tokens == second.usage.input_tokens
    reply = first.output[0].content[0].text
    assert second.output[0].content[0].text == reply and "555-0101" in reply, reply


def test_turns_wait_for_response_create_and_audio_items_are_transcribed(server, voice):
    async def call():
        async with connect(server, "parley-agent") as connection:
            await events_until(connection, "session.created")
            await connection.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": {
                "type": "server_vad", "create_response": False}}}})
            updated = await events_until(connection, "session.updated")
            await say(connection, np.concatenate([voice("What time do you open on Saturday?", 24_000),
                                                  silence(1500)]))
            heard: list = []
            await events_until(connection, "conversation.item.input_audio_transcription.completed", heard)
            with pytest.raises(asyncio.TimeoutError):    # the turn is not answered until the client asks
                await events_until(connection, "response.created", heard, timeout_s=2)
            await connection.response.create()
            saturday: list = []
            await events_until(connection, "response.done", saturday)
            # a recorded question sent as an item of its own
            question = voice("What is your phone number?", 24_000).astype("<i2").tobytes()
            await connection.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_audio", "audio": base64.b64encode(question).decode()}]})
            await connection.response.create()
            phone: list = []
            await events_until(connection, "response.done", phone)
            return updated, heard, saturday, phone

    updated, heard, saturday, phone = asyncio.run(call())
    assert updated.session.audio.input.turn_detection.create_response is False
    assert "saturday" in next(e for e in heard if e.type.endswith("transcription.completed")).transcript.lower()
    assert "9" in next(e for e in saturday if e.type == "response.output_audio_transcript.done").transcript
    transcribed = next(e for e in phone if e.type == "conversation.item.input_audio_transcription.completed")
    assert "phone" in transcribed.transcript.lower()
    assert "555" in next(e for e in phone if e.type == "response.output_audio_transcript.done").transcript


def test_mulaw_audio_committed_by_hand(server, voice):
    async def call():
        async with connect(server, "parley-agent") as connection:
            await events_until(connection, "session.created")
            await connection.session.update(session={"type": "realtime", "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
                "output": {"format": {"type": "audio/pcmu"}}}})
            updated = await events_until(connection, "session.updated")
            await say(connection, voice("What is your phone number?", 8_000), rate=8_000, mulaw=True)
            await connection.input_audio_buffer.commit()
            await connection.response.create()
            seen: list = []
            await events_until(connection, "response.done", seen)
            return updated, seen

    updated, seen = asyncio.run(call())
    assert updated.session.audio.input.turn_detection is None
    assert updated.session.audio.output.format.type == "audio/pcmu"
    kinds = [e.type for e in seen]
    assert "input_audio_buffer.speech_started" not in kinds                 # no server VAD
    heard = next(e for e in seen if e.type == "conversation.item.input_audio_transcription.completed")
    assert "phone" in heard.transcript.lower()
    frames = [base64.b64decode(e.delta) for e in seen if e.type == "response.output_audio.delta"]
    assert frames and {len(f) for f in frames} == {160}                    # 20 ms of mu-law at 8 kHz
    assert np.abs(mulaw_to_pcm(b"".join(frames))).max() > 2000
    assert seen[-1].response.status == "completed"


def test_bad_events_get_error_events_and_the_session_goes_on(server):
    async def call():
        async with connect(server, "parley-agent") as connection:
            await events_until(connection, "session.created")
            errors = []
            for event in ({"type": "no.such.event"},
                          {"type": "input_audio_buffer.append", "audio": "not base64!"},
                          {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()},
                          {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/opus"}}}}},
                          {"type": "session.update", "session": {"tools": [WEATHER]}},
                          {"type": "session.update", "session": {"output_modalities": ["video"]}},
                          {"type": "response.cancel"},
                          {"type": "response.create"},
                          {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0,
                           "audio_end_ms": 10},
                          {"type": "conversation.item.delete", "item_id": "item_x"},
                          {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                              {"type": "input_audio", "audio": "not base64!"}]}},
                          {"type": "response.create", "response": {"conversation": "none"}}):
                await connection.send(dict(event, event_id=f"mine_{len(errors)}"))
                errors.append(await events_until(connection, "error"))
            await connection._connection.send("{not json")
            errors.append(await events_until(connection, "error"))
            await connection.session.update(session={"type": "realtime", "instructions": "Be brief."})
            updated = await events_until(connection, "session.updated")
            return errors, updated

    errors, updated = asyncio.run(call())
    codes = [e.error.code for e in errors]
    assert codes == ["invalid_event", "invalid_base64", "invalid_audio", "unsupported", "unsupported", "invalid_value",
                     "response_cancel_not_active", "no_user_input", "item_not_found", "item_not_found",
                     "invalid_base64", "unsupported", "invalid_json"]
    assert [e.error.event_id for e in errors[:12]] == [f"mine_{i}" for i in range(12)]
    assert all(e.error.message for e in errors)
    assert updated.session.instructions == "Be brief."


def test_the_load_generator_drives_realtime_callers_too(server, voice):
    from app.loadtest import run_level

    question = np.concatenate([silence(300), voice("What time do you open?", 24_000)])
    row = asyncio.run(run_level(server, 1, [question], turns=2, timeout_s=30, transport="realtime"))
    assert row["turns"] == row["answered"] == 2 and not row["dropped"], row
    assert 600 <= row["p50"] <= row["p95"] < 10_000, row   # at least the end-of-turn silence
    assert row["sessions_after"] == 0


def test_an_unknown_model_is_refused_at_the_handshake(server):
    async def call():
        async with connect(server, "gpt-realtime"):
            pass

    with pytest.raises(Exception, match="404"):
        asyncio.run(call())
