"""OpenAI's Realtime API at `/v1/realtime` (WebSocket): a voice client written for OpenAI talks to Parley.

The call is one Session (app.pipeline.session) like a phone call's: appended audio goes through Parley's turn detector,
Whisper, the agent and Piper, and the reply's audio comes back as `response.output_audio.delta` events at
real-time pace (so a barge-in knows what was heard). The event names and shapes are those of the `openai`
package's `types.realtime` (the GA protocol); the protocol's side is here, the pipeline's in Session.

`?model=parley-agent` (the default) is Parley's front desk: its own tools, run here, and the business of its
profile. `?model=<the loaded model>` (e.g. parley-smollm2) writes the conversation's next message under the
session's `instructions`, and calls the client's `tools`: a call comes back as a `function_call` item for the
client to run, which sends its `function_call_output` and a `response.create`.

The reply is spoken (`output_modalities` ["audio"], with its transcript) or, for a session or one `response.create`
that asks for ["text"], written only: `response.output_text` events and no speech. A `response.create` may set its
own `instructions`, `tools`, `tool_choice`, `max_output_tokens` and `output_modalities` for that response alone.
With server VAD and `create_response: false` a turn is transcribed and waits for the client's `response.create`.
A user message may carry recorded audio (`input_audio`): it is transcribed like a turn. Deleted items leave the
model's history too.

Not supported (each gets an `error` event, and the session goes on): out-of-band responses (`conversation: "none"`
or a response's own `input`). Accepted and not used: `voice` (the bundled voice speaks), the VAD's tuning (Parley's
own end of turn decides), `transcription` settings (the input is always transcribed, with the bundled Whisper).
"""

from app.api.realtime.call import router

__all__ = ["router"]
