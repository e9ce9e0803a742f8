"""Per-turn latency trace: where the time between the end of the user's speech and the reply's first sound went."""
import time
from dataclasses import dataclass, field

# Stages in order: each metric is the time from the previous mark (the endpoint decision starts the clock).
STAGES = (
    ("asr_ms", "transcript"),              # endpoint decision -> final transcript
    ("llm_ttft_ms", "llm_first_text"),     # final transcript -> first settled text from the LLM
    ("tts_ttfb_ms", "tts_first_audio"),    # first LLM text -> first synthesized audio
    ("send_ms", "first_audio_out"),        # first synthesized audio -> first sample pulled by the transport
)


@dataclass
class TurnTrace:
    end_of_turn_delay_ms: float                    # last voiced frame -> endpoint decision, in stream time
    start_s: float = field(default_factory=time.perf_counter)   # wall clock at the endpoint decision
    marks: dict[str, float] = field(default_factory=dict)       # stage name -> wall clock (first time only)
    transcript: str = ""
    reply: str = ""
    heard: str = ""                                # what the user heard before a barge-in
    drafted: bool = False                          # the reply started from work done during the silence
    p_complete: float | None = None                # the language model's P(the turn was complete), when it judged
    first_chunk_id: int | None = None
    llm_passes: int = 0
    llm_tokens: int = 0
    llm_ms: float = 0.0

    def mark(self, name: str) -> None:
        """Record the first time a stage is reached."""
        self.marks.setdefault(name, time.perf_counter())

    def metrics(self) -> dict[str, float]:
        """Stage latencies in ms; a stage the turn never reached is absent."""
        out = {"end_of_turn_delay_ms": round(self.end_of_turn_delay_ms, 1)}
        previous = self.start_s
        for metric, mark in STAGES:
            if mark not in self.marks:
                break
            out[metric] = round((self.marks[mark] - previous) * 1000, 1)
            previous = self.marks[mark]
        e2e_ms = self.e2e_latency_ms()
        if e2e_ms is not None:
            out["e2e_latency_ms"] = round(e2e_ms, 1)
        out.update(llm_ms=round(self.llm_ms, 1), llm_passes=self.llm_passes, llm_tokens=self.llm_tokens,
                   drafted=self.drafted, end_of_turn="vad" if self.p_complete is None else "lm")
        if self.p_complete is not None:
            out["p_complete"] = round(self.p_complete, 4)
        return out

    def e2e_latency_ms(self) -> float | None:
        """The caller's last voiced frame to the reply's first audio sent; None until it is sent."""
        sent = self.marks.get("first_audio_out")
        return None if sent is None else self.end_of_turn_delay_ms + (sent - self.start_s) * 1000

    def metrics_event(self) -> dict:
        return {"type": "metrics", **self.metrics()}

    def summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.metrics().items())
