"""Session's reply: the agent's text spoken clause by clause as it streams, then what follows it.

The agent runs in the LLM executor; each settled piece of text goes to the page (`reply` events) and, clause by
clause, to TTS and playback. Once the reply's first audio went out the turn's metrics are sent, and a control tool
(end_call, transfer_to_human) acts once the reply was heard. A mixin of app.pipeline.session.Session, whose state it
uses: options, services, agent, playback, turns, on_control, _loop, _closed, _preparing, _pending_control,
_ready_clause, _emit, _side_task.
"""
import asyncio
import logging
import threading
from typing import Callable

from app.pipeline.trace import TurnTrace
from speech.audio import resample
from speech.tts import ClauseSplitter

log = logging.getLogger(__name__)

CONTROL_TOOLS = ("end_call", "transfer_to_human")


class Replying:
    """The reply half of a Session: speaking it, the turn's metrics, a control tool's action."""

    async def _respond(self, text: str, trace: TurnTrace, cancel: threading.Event, first=None) -> None:
        """Run the agent in its executor and speak its text clause by clause as blocks settle."""
        loop = self._loop
        pieces: asyncio.Queue[str | None] = asyncio.Queue()

        def on_text(piece: str) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, piece)

        def on_tool(call) -> None:
            loop.call_soon_threadsafe(self._on_tool, call)

        job = loop.run_in_executor(self.services.llm_pool, self.agent.respond, text, on_text, on_tool, cancel, first)
        job.add_done_callback(lambda _: pieces.put_nowait(None))
        splitter, said = ClauseSplitter(self.options.first_phrase_words), ""
        while (piece := await pieces.get()) is not None:
            trace.mark("llm_first_text")
            said += piece
            await self._emit({"type": "reply", "text": said.strip(), "final": False})
            for clause in splitter.push(piece):
                await self._speak(clause, trace, cancel)
        if (rest := splitter.flush()) is not None:
            await self._speak(rest, trace, cancel)
        result = await job
        trace.llm_passes, trace.llm_tokens, trace.llm_ms = result.passes, result.tokens, result.llm_s * 1000
        trace.reply = result.reply
        if not result.cancelled and not cancel.is_set():
            await self._emit({"type": "reply", "text": result.reply, "final": True})
            self._prepare_next()

    def _prepare_next(self) -> None:
        """While the caller hears the reply: a long call's window move, before the next turn waits for it
        (Agent.prepare_next), as speculative work that gives way to any caller's turn."""
        prepare = getattr(self.agent, "prepare_next", None)
        if prepare is None or self._closed:
            return
        stop = threading.Event()
        self._preparing.append((self.services.llm_lanes.submit(prepare, stop, speculative=True, interrupt=stop.set),
                                stop))
        self._preparing = [(job, stop) for job, stop in self._preparing if not job.done()]

    async def _speak(self, clause: str, trace: TurnTrace, cancel: threading.Event) -> None:
        if cancel.is_set() or not clause.strip() or not self.options.speak:
            return
        tts = self.services.tts
        ready, self._ready_clause = self._ready_clause, None
        if ready is not None and ready[0] == clause:
            audio = ready[1]
        else:
            audio = await self._loop.run_in_executor(self.services.tts_pool, tts.synthesize, clause)
        if cancel.is_set():
            return
        trace.mark("tts_first_audio")
        audio = resample(audio, tts.sample_rate_hz, self.playback.sample_rate_hz)
        if trace.first_chunk_id is None:
            trace.first_chunk_id = self.playback.enqueue(audio, clause)
        else:
            self.playback.enqueue(audio, clause)

    def _on_tool(self, call) -> None:
        event = {"type": "tool", "name": call.name, "arguments": call.arguments, "result": call.result}
        self._side_task(self._emit(event))
        if call.name in CONTROL_TOOLS and call.result.get("ok"):
            self._pending_control = call.name

    async def _finish_turn(self, trace: TurnTrace, cancel: threading.Event) -> None:
        """After the reply: the metrics event once audio went out, then any control action once it was heard.
        Both waits end with the turn (a barge-in, or a call that ends with its reply unsent: nobody will pull it)."""
        if not await self._until(lambda: not self.playback.busy or "first_audio_out" in trace.marks, cancel):
            return
        await self._emit(trace.metrics_event())
        if self.observer is not None:
            self.observer.turn(trace.metrics())
        log.info("turn: %s", trace.summary())
        if self._pending_control:
            if not await self._until(lambda: not self.playback.busy, cancel):
                return
            control, self._pending_control = self._pending_control, None
            if self.on_control is not None:
                await self.on_control(control)

    @staticmethod
    async def _until(condition: Callable[[], bool], cancel: threading.Event, poll_s: float = 0.005) -> bool:
        """Wait for `condition` (set by the transport's thread); False if the turn was cancelled first."""
        while not condition():
            if cancel.is_set():
                return False
            await asyncio.sleep(poll_s)
        return True
