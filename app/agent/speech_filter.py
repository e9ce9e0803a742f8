"""What of a streamed reply is spoken: its text outside tool-call markup."""
from typing import Callable

from app.agent.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN


class SpeechFilter:
    """Passes streamed model text through to `on_text`, holding back anything inside tool-call markup."""

    def __init__(self, on_text: Callable[[str], None] | None):
        self.on_text = on_text
        self.text = ""          # everything the model wrote in this generation
        self.emitted = 0        # characters of self.text already judged (spoken or skipped)

    def feed(self, block: str) -> None:
        self.text += block
        if self.on_text is None:
            return
        while True:
            pending = self.text[self.emitted:]
            start = pending.find(TOOL_CALL_OPEN)
            if start < 0:
                # keep a possible partial "<tool_c" at the end back until the next block decides it, and
                # whitespace alone until words follow it (an API streams the text exactly)
                keep = next((k for k in range(len(TOOL_CALL_OPEN) - 1, 0, -1)
                             if pending.endswith(TOOL_CALL_OPEN[:k])), 0)
                if pending[: len(pending) - keep].strip():
                    self._say(pending[: len(pending) - keep])
                    self.emitted += len(pending) - keep
                return
            self._say(pending[:start])
            end = pending.find(TOOL_CALL_CLOSE, start)
            if end < 0:
                self.emitted += start
                return
            self.emitted += end + len(TOOL_CALL_CLOSE)

    def finish(self) -> None:
        """The generation ended: what is pending is judged as it is."""
        self.feed("")

    def _say(self, text: str) -> None:
        if text.strip():
            self.on_text(text)
