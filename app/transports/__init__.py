"""How audio reaches a Session and leaves it: one base for a call's lifecycle (`base`) and one module per
transport: the browser (`webrtc`), a phone call (`twilio`, its wire format in `twilio_wire`), this computer's
microphone (`mic`) and a WAV file (`file`). OpenAI's Realtime protocol is one more, in app.api.realtime."""
