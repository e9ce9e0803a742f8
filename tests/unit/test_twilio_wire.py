"""Twilio's wire format (app.transports.twilio_wire): pure functions, no sockets."""
import pytest

from app.transports import twilio_wire as twilio


def test_signature_matches_twilios_documented_example():
    # The example request of Twilio's security docs, with its published signature.
    params = {"CallSid": "CA1234567890ABCDE", "Caller": "+12349013030", "Digits": "1234",
              "From": "+12349013030", "To": "+18005551212"}
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert twilio.compute_signature("12345", url, params) == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    assert twilio.signature_valid("12345", "0/KCTR6DLpKmkAf8muzZqo1nDgQ=", url, params)
    assert not twilio.signature_valid("12345", "0/KCTR6DLpKmkAf8muzZqo1nDgQ=", url, {**params, "Digits": "9"})
    assert not twilio.signature_valid("12345", None, url, params)
    # a proxy that adds the default port does not break it
    assert twilio.signature_valid("12345", "0/KCTR6DLpKmkAf8muzZqo1nDgQ=",
                                  "https://mycompany.com:443/myapp.php?foo=1&bar=2", params)


def test_twiml_connects_a_bidirectional_stream():
    twiml = twilio.connect_stream_twiml("wss://voice.example.com/telephony/twilio")
    assert twiml.endswith('<Response><Connect><Stream url="wss://voice.example.com/telephony/twilio"/>'
                          "</Connect></Response>")


def test_a_transfer_dials_a_number_or_a_sip_address_and_any_other_end_hangs_up():
    assert twilio.dial_target(" +1 (555) 010-0199 ") == "+15550100199"
    assert twilio.dial_target("sip:frontdesk@pbx.example.com") == "sip:frontdesk@pbx.example.com"
    for bad in ("", "the front desk", "+1 555 CALL-NOW", "12", "1234567890123456", "sip:", "sip:a b",
                "sip:x@y><Hangup/>"):
        with pytest.raises(ValueError, match="neither a phone number"):
            twilio.dial_target(bad)
    assert twilio.dial_twiml("+15550100199").endswith("<Response><Dial>+15550100199</Dial></Response>")
    assert twilio.dial_twiml("sip:desk@pbx.example.com").endswith(
        "<Response><Dial><Sip>sip:desk@pbx.example.com</Sip></Dial></Response>")
    assert twilio.hangup_twiml().endswith("<Response><Hangup/></Response>")
    twiml = twilio.connect_stream_twiml("wss://h/telephony/twilio", action="https://h/telephony/twilio/after?a=1&b=2")
    assert '<Connect action="https://h/telephony/twilio/after?a=1&amp;b=2"><Stream url="wss://h/telephony/twilio"/>' \
        in twiml


def test_start_with_another_media_format_is_refused():
    message = {"event": "start", "start": {"streamSid": "MZ1", "mediaFormat": {
        "encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1}}}
    with pytest.raises(twilio.ProtocolError, match="audio/x-mulaw at 8000 Hz"):
        twilio.parse_start(message)
