"""The server's figures for Prometheus (GET /metrics): every turn's latency by stage, sessions by transport,
refusals and failures.

Stage names follow LiveKit's agent metrics (end_of_turn_delay, llm_ttft, tts_ttfb, e2e_latency), in seconds as
Prometheus names want; each is the stage of app.pipeline.trace.TurnTrace with the same name in ms. Each app has its own
registry, so two servers in one process (the tests) count apart.
"""
from collections import Counter as Tally
from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TRANSPORTS = ("webrtc", "twilio", "realtime")
# app.pipeline.trace metric (ms) -> histogram name (seconds) and what it measures
STAGES = {
    "end_of_turn_delay_ms": ("end_of_turn_delay", "the caller's last voiced frame to the end-of-turn decision"),
    "asr_ms": ("asr", "the end-of-turn decision to the final transcript"),
    "llm_ttft_ms": ("llm_ttft", "the final transcript to the language model's first spoken text"),
    "tts_ttfb_ms": ("tts_ttfb", "the first spoken text to its first synthesized audio"),
    "e2e_latency_ms": ("e2e_latency", "the caller's last voiced frame to the reply's first audio sent"),
}
BUCKETS_S = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0)


class SessionObserver:
    """What one session reports: each finished turn's metrics, and its failure."""

    def __init__(self, metrics: "Metrics", transport: str):
        self.metrics, self.transport = metrics, transport

    def turn(self, stages_ms: dict) -> None:
        for key, histogram in self.metrics.stages.items():
            if isinstance(stages_ms.get(key), (int, float)):
                histogram.labels(self.transport).observe(stages_ms[key] / 1000)

    def failed(self, kind: str) -> None:
        """The session ended on an error of `kind` ("turn": a model or tool call; "session": the input loop)."""
        self.metrics.failed.labels(self.transport).inc()
        self.metrics.errors.labels(kind).inc()


class Metrics:
    """One server's metrics; `live_calls()` gives the calls open now (objects with a TRANSPORT attribute)."""

    def __init__(self, live_calls: Callable[[], Iterable]):
        self.live_calls = live_calls
        self.registry = CollectorRegistry()
        self.stages = {key: Histogram(f"parley_{name}_seconds", f"Per turn: {what}.", ["transport"],
                                      buckets=BUCKETS_S, registry=self.registry)
                       for key, (name, what) in STAGES.items()}
        self.started = Counter("parley_sessions", "Sessions started.", ["transport"], registry=self.registry)
        self.refused = Counter("parley_sessions_refused", "Sessions refused, by reason (HTTP status or kind).",
                               ["transport", "reason"], registry=self.registry)
        self.failed = Counter("parley_sessions_failed", "Sessions ended by an error.", ["transport"],
                              registry=self.registry)
        self.errors = Counter("parley_errors", "Errors, by kind.", ["kind"], registry=self.registry)
        self.active = Gauge("parley_sessions_active", "Sessions open now.", ["transport"], registry=self.registry)

    def observer(self, transport: str) -> SessionObserver:
        """A session's reporter."""
        return SessionObserver(self, transport)

    def start(self, transport: str) -> None:
        """A session began (its offer answered, its stream started)."""
        self.started.labels(transport).inc()

    def refuse(self, transport: str, reason: str) -> None:
        self.refused.labels(transport, reason).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        live = Tally(getattr(call, "TRANSPORT", "other") for call in self.live_calls())
        for transport in set(TRANSPORTS) | set(live):
            self.active.labels(transport).set(live[transport])
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
