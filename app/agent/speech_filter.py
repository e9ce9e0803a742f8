"""What of a streamed reply is spoken: its text outside tool-call markup, its first sentence vetted before any of it."""
import re
from typing import Callable

from app.agent.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

_SENTENCE_END = re.compile(r"[.?!](?=\s|$)")


class SpeechFilter:
    """Passes streamed model text through to `on_text`, holding back anything inside tool-call markup.

    With `vet`, the reply's first sentence is judged whole before any of it is spoken: if vet(sentence) is False,
    the generation's speech is withheld (`withheld`) until `release`.
    """

    def __init__(self, on_text: Callable[[str], None] | None, vet: Callable[[str], bool] | None = None):
        self.on_text = on_text
        self.vet = vet
        self.withheld = False
        self.text = ""          # everything the model wrote in this generation
        self.emitted = 0        # characters of self.text already judged (spoken or skipped)

    def feed(self, block: str, done: bool = False) -> None:
        self.text += block
        if self.vet is not None:
            if self.text.lstrip().startswith("<"):      # a call comes first: the speech after it is not vetted
                self.vet = None
            else:
                end = _SENTENCE_END.search(self.text)
                if end is None and not done:
                    return
                self.withheld = not self.vet(self.text[:end.end()] if end else self.text)
                self.vet = None
        if self.on_text is None or self.withheld:
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
        """The generation ended: a first sentence that never ended is vetted as it is."""
        self.feed("", done=True)

    def release(self) -> None:
        """Speak what was withheld after all."""
        self.withheld = False
        self.feed("")

    def _say(self, text: str) -> None:
        if text.strip():
            self.on_text(text)
