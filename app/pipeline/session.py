"""One conversation: audio in -> turn detector -> ASR -> agent -> TTS -> playback, with barge-in and a latency trace.

The turn detector says speech or not; `_on_speech_start` / `_on_speech_end` decide what work that triggers. During
the silence after speech, app.pipeline.drafting drafts the turn and judges whether it is over (the end of turn is
the VAD's fixed silence, or the language model's judgement); a caller who goes on before hearing any reply has the
turn heard again with what follows; app.pipeline.replying speaks the reply. Every model call runs in the Services'
executors; this module owns the coroutines and queues.
"""
import asyncio
import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Awaitable, Callable

import numpy as np

from app.pipeline.drafting import Draft, Drafting
from app.pipeline.playback import Playback
from app.pipeline.replying import Replying
from app.pipeline.services import Services
from app.pipeline.trace import TurnTrace
from speech.audio import FRAME_MS, FRAME_SAMPLES
from speech.endpoint import EndpointPolicy
from speech.vad import SpeechEnd, SpeechStart, TurnDetector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionOptions:
    barge_in: bool = True             # user speech during agent speech interrupts it; False = input ignored while the agent speaks
    realtime: bool = True             # input arrives at real-time pace (partial transcripts only make sense then)
    # stream time between partial transcripts while the user speaks (the page's live caption); None: none, where
    # nobody would see them (a phone call without an event hook, the Realtime API): each is a Whisper run
    partial_interval_ms: int | None = 700
    speak: bool = True                # the reply is spoken; False: its text only (reply events), no audio
    answer_turns: bool = True         # a turn the detector ends is answered; False: transcribed only, the transport
                                      # answers when it chooses (respond_to)
    # Draft the turn (ASR, the LLM's first answer, the first clause's audio) once the user has been silent this
    # long; if the endpoint comes with no new speech, the reply starts from the draft. None = off.
    # Must be >= VadConfig.tail_ms, so the drafted audio is exactly the audio the endpoint hands over.
    # NOTE: 120 ms took ~100 ms off app.bench's e2e on 2 CPU cores (1316 and 1298 ms against 1405 and 1430, two
    # interleaved pairs, 2026-12-03), where the draft is rarely done when the turn ends; but on the endpoint set's
    # complete turns it starts 0.77 drafts a turn that the caller's next words drop, against 0.17 at 200 ms (0.32 at
    # 160), each an ASR run and the start of a generation taken from other callers: kept at 200.
    speculate_ms: int | None = 200
    # ... and from this silence while no model has work in the process (a lone caller's: the cores would idle), where
    # dropped drafts take nothing from anyone. At VadConfig.tail_ms the endpoint's audio is already what it will be.
    # NOTE: `python -m app.bench --repeats 2` (2 AMD EPYC cores, 2026-12-06): e2e 507.9 against 588.6 ms, the end of
    # turn decided at the same 340 ms of silence (EndpointPolicy.check_ms): the first sound had waited for the draft.
    speculate_idle_ms: int | None = 80
    # The reply's first audio is a short first phrase (speech.tts.ClauseSplitter): its first clause boundary, or
    # about this many words into a long sentence. None: whole clauses only.
    first_phrase_words: int | None = 8
    # When silence means the caller is done (speech.endpoint): the language model judges the draft's transcript,
    # so a turn that cannot end there ("my name is", "I'd like to book a") waits longer. Needs drafting and a model
    # decoded left to right (Engine.left_to_right); otherwise, or None: the VAD's fixed silence.
    end_of_turn: EndpointPolicy | None = EndpointPolicy()


class Session(Drafting, Replying):
    """One caller's conversation; the transport feeds `push_audio` and pulls `playback`."""

    def __init__(self, services: Services, *, output_rate_hz: int, send_event: Callable[[dict], Awaitable[None]],
                 on_control: Callable[[str], Awaitable[None]] | None = None,
                 options: SessionOptions = SessionOptions(), confirm_marks: bool = False, observer=None,
                 agent=None):
        self.services = services
        self.observer = observer                           # app.server.metrics.SessionObserver, or None
        self.options = options
        self.send_event = send_event
        self.on_control = on_control
        self.on_clear: Callable[[], None] | None = None   # transports that buffer at the far end (Twilio `clear`)
        # the turn detector's decisions as they happen: on_speech("started" | "stopped", stream ms)
        self.on_speech: Callable[[str, float], None] | None = None
        self._policy = options.end_of_turn if (options.speculate_ms is not None
                                               and getattr(services.engine, "left_to_right", False)) else None
        vad = services.vad_config
        if self._policy is not None:   # the policy ends turns; the VAD's own endpoint is the longest wait
            vad = dataclasses.replace(vad, silence_ms=self._policy.max_silence_ms)
        self.detector = TurnDetector(vad)
        self.agent = agent if agent is not None else services.new_agent()   # app.agent.loop.Agent, or one like it
        self.playback = Playback(output_rate_hz, confirm_marks)
        self.playback.add_listener(self._on_playback_event)
        services.conversation_started()   # its KV cache kept between turns; close() ends it
        self.turns: list[TurnTrace] = []                   # every turn's latency trace, newest last
        self._input: asyncio.Queue[np.ndarray | None] = asyncio.Queue()
        self._reframe = np.empty(0, dtype=np.int16)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turn_task: asyncio.Task | None = None
        self._cancel = threading.Event()                   # set to stop the current turn's LLM and TTS work
        self._stream_ms = 0.0
        self._next_partial_ms = 0.0
        self._partial_busy = False
        self._side_tasks: set[asyncio.Task] = set()        # partial transcripts, tool events: held until done
        self._preparing: list = []                          # (Future, stop Event) of Agent.prepare_next jobs
        self._pending_control: str | None = None
        self._draft: Draft | None = None
        self._ready_clause: tuple[str, np.ndarray] | None = None   # the drafted first clause and its audio
        self._closed = False
        self._failed = False                               # a turn failed: the session ends
        self._carry = np.zeros(0, dtype=np.int16)          # audio of a turn the caller went on from, unanswered
        self._turn_audio = self._carry                     # the last turn's audio (carry included)

    # --- input -----------------------------------------------------------------------------------------------

    def push_audio(self, samples: np.ndarray) -> None:
        """int16 mono 16 kHz audio of any length; call on the event loop's thread."""
        if self._closed:
            return
        self._reframe = np.concatenate([self._reframe, np.asarray(samples, dtype=np.int16).reshape(-1)])
        n = len(self._reframe) // FRAME_SAMPLES
        for i in range(n):
            self._input.put_nowait(self._reframe[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES])
        self._reframe = self._reframe[n * FRAME_SAMPLES:]

    def push_audio_threadsafe(self, samples: np.ndarray) -> None:
        """push_audio from another thread (a sound-card callback)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.push_audio, np.array(samples, dtype=np.int16))

    async def run(self) -> None:
        """Process input until close() or end_input(); a failure (of the input loop or of a turn) ends this
        session with an `error` event."""
        self._loop = asyncio.get_running_loop()
        try:
            while (frame := await self._input.get()) is not None and not self._failed:
                self._stream_ms += FRAME_MS
                if not self.options.barge_in and self._agent_speaking():
                    frame = np.zeros_like(frame)   # the agent's own voice through the speakers is not the user
                for event in self.detector.push(frame):
                    if isinstance(event, SpeechStart):
                        if self.on_speech is not None:
                            self.on_speech("started", event.time_ms)
                        await self._on_speech_start(event)
                    elif isinstance(event, SpeechEnd):
                        self._end_turn(event)
                self._maybe_partial()
                self._maybe_draft()
                if not self.options.realtime:
                    await self._judged()
                if (end := self._decided_end()) is not None:
                    self._end_turn(end)
            if not self._closed and not self._failed and self.detector.in_speech:
                self._end_turn(self.detector.end_now())   # the input ran out mid-turn: answer what was said
        except Exception as exc:
            log.exception("session failed")
            if self.observer is not None:
                self.observer.failed("session")
            await self.report_error(f"session failed: {exc}")
        finally:
            if self._closed:
                await self._stop_turn()
            elif self._turn_task is not None:
                await asyncio.gather(self._turn_task, return_exceptions=True)   # input ended: let the last turn finish

    async def close(self) -> None:
        """End the session: stop the current turn and drop queued audio. Idempotent."""
        if not self._closed:
            self._closed = True
            self._input.put_nowait(None)
            self.services.conversation_ended(self.agent)
        await self._stop_turn()
        for job, stop in self._preparing:
            stop.set()
            job.cancel()
        for task in list(self._side_tasks):
            task.cancel()
        self.playback.clear()

    def _side_task(self, coro) -> None:
        """Run coro beside the turn, a reference held until it ends (the loop keeps only weak ones)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def end_input(self) -> None:
        """No more audio will come (a file ran out); pending turns still finish."""
        if not self._closed:
            self._input.put_nowait(None)

    async def wait_idle(self, poll_s: float = 0.01) -> None:
        """Until all input is processed, no turn is in progress and playback has drained."""
        while (not self._input.empty() or self.playback.busy
               or (self._turn_task is not None and not self._turn_task.done())):
            await asyncio.sleep(poll_s)

    def _agent_speaking(self) -> bool:
        return self.playback.busy or (self._turn_task is not None and not self._turn_task.done())

    # --- turn decisions --------------------------------------------------------------------------------------

    async def _on_speech_start(self, event: SpeechStart) -> None:
        if self.options.barge_in and self._agent_speaking():
            trace = self.turns[-1] if self.turns else None
            unanswered = trace is not None and "first_audio_out" not in trace.marks
            heard = await self.interrupt()
            log.info("barge-in at %.0f ms; the user heard %r", event.time_ms, heard)
            # They went on before any reply was heard: that turn had not ended, and what they said in it is heard
            # again with what follows (the next turn's audio starts with it). A turn reaches the history once
            # transcribed; one that ran a tool stays, and is not said again.
            if unanswered and (not trace.transcript or self.agent.retract_last_turn()):
                self._carry = self._turn_audio

    async def interrupt(self) -> str:
        """Stop the agent's reply (a barge-in, or a client that cancels it): silence first (the caller must stop
        hearing it now), then the history keeps what was heard, which is returned."""
        self._cancel.set()
        heard = self.playback.clear()
        if self.on_clear is not None:
            self.on_clear()
        trace = self.turns[-1] if self.turns else None
        if trace is not None:
            trace.heard = " ".join(filter(None, [trace.heard, heard]))
        await self._stop_turn()
        self.agent.truncate_last_reply(trace.heard if trace else heard)
        return trace.heard if trace else heard

    async def respond_to(self, text: str | None) -> None:
        """Answer text the transport already has (typed, or transcribed by itself), as a turn of its own; None:
        the agent continues the conversation as it stands (after a tool's output, app.api.realtime)."""
        await self._stop_turn()
        trace = TurnTrace(end_of_turn_delay_ms=0.0)
        trace.transcript = text or ""
        self.turns.append(trace)
        self._cancel = threading.Event()
        self._turn_task = asyncio.create_task(self._answer(text, trace, self._cancel))

    def _end_turn(self, event: SpeechEnd) -> None:
        if self.on_speech is not None:
            self.on_speech("stopped", event.time_ms)
        self._on_speech_end(event)

    def _on_speech_end(self, event: SpeechEnd) -> None:
        trace = TurnTrace(end_of_turn_delay_ms=event.time_ms - event.last_voiced_ms)
        self.turns.append(trace)
        draft, self._draft = self._draft, None
        if draft is not None and draft.p_complete is not None and draft.p_complete.done():
            trace.p_complete = draft.p_complete.result()   # the judgement this turn ended by
        if draft is not None and draft.audio_samples != len(event.audio):
            draft.drop()   # computed on other audio
            draft = None
        # the draft becomes this turn's work: what stops the turn (a barge-in) stops the draft's generation too,
        # and its model work still waiting goes before other sessions' drafts
        if draft is not None:
            draft.adopt()
        self._cancel = draft.cancel if draft is not None else threading.Event()
        self._turn_audio, self._carry = np.concatenate([self._carry, event.audio]), self._carry[:0]
        self._turn_task = asyncio.create_task(self._run_turn(self._turn_audio, trace, self._cancel, draft))

    async def _stop_turn(self) -> None:
        if self._draft is not None:
            self._draft.drop()
            self._draft = None
        task, self._turn_task = self._turn_task, None
        if task is not None and not task.done():
            self._cancel.set()
            try:
                await task
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():
                    raise  # our caller was cancelled, not (only) the turn

    def _maybe_partial(self) -> None:
        # only while the caller is voicing: in a silence, the draft transcribes the same words on the same cores
        # (NOTE: a partial begun there ran beside the draft's transcript, which then took ~330 ms instead of ~190,
        # and the end-of-turn judgement that waits on it as much longer; app.bench's questions, 2 cores)
        if (not (self.options.realtime and self.detector.in_speech) or self._partial_busy
                or self.options.partial_interval_ms is None or self.detector.trailing_silence_ms > 0):
            return
        if self._stream_ms < self._next_partial_ms:
            return
        self._next_partial_ms = self._stream_ms + self.options.partial_interval_ms
        audio = self.detector.utterance_audio()
        if len(audio) < FRAME_SAMPLES * 25:   # under 0.5 s there is nothing worth showing
            return
        self._partial_busy = True
        self._side_task(self._partial(audio))

    async def _partial(self, audio: np.ndarray) -> None:
        try:
            text = await self._loop.run_in_executor(self.services.partial_pool, self.services.asr.transcribe, audio)
            if text and self.detector.in_speech:
                await self._emit({"type": "transcript", "text": text, "final": False})
        except Exception:
            log.exception("partial transcript failed")
        finally:
            self._partial_busy = False

    # --- one turn --------------------------------------------------------------------------------------------

    async def _run_turn(self, audio: np.ndarray, trace: TurnTrace, cancel: threading.Event,
                        draft: Draft | None = None) -> None:
        try:
            text = await self._transcribe(audio, draft)
            trace.mark("transcript")
            if not text.strip() or cancel.is_set():
                return
            trace.transcript = text
            await self._emit({"type": "transcript", "text": text, "final": True})
            if not self.options.answer_turns:
                if draft is not None:
                    draft.drop()   # its drafted answer is not wanted: the transport answers when it chooses
                return
            first = await self._drafted_turn(draft, trace) if draft is not None else None
            await self._answer(text, trace, cancel, first)
        except Exception as exc:
            await self._fail(exc)

    async def _answer(self, text: str | None, trace: TurnTrace, cancel: threading.Event, first=None) -> None:
        try:
            self.playback.take_heard()   # heard-text accounting starts with this turn
            await self._respond(text, trace, cancel, first)
            if not cancel.is_set():
                await self._finish_turn(trace, cancel)
        except Exception as exc:
            await self._fail(exc)

    async def _fail(self, exc: Exception) -> None:
        # A model or tool that failed once is not trusted with the rest of the call: the `error` event goes
        # out and this session ends (its transport hangs up); every other session goes on.
        log.exception("turn failed; ending the session")
        if self.observer is not None:
            self.observer.failed("turn")
        await self.report_error(f"turn failed: {exc}")
        self._failed = True
        self._input.put_nowait(None)

    def _on_playback_event(self, event: str) -> None:
        # called on the transport's thread when it pulls audio
        if event == "started" and self.turns and self._loop is not None:
            trace = self.turns[-1]
            self._loop.call_soon_threadsafe(trace.mark, "first_audio_out")

    async def report_error(self, message: str) -> None:
        """Tell the client something went wrong (an `error` event, in the transport's own form)."""
        await self._emit({"type": "error", "message": message})

    async def _emit(self, event: dict) -> None:
        try:
            await self.send_event(event)
        except Exception:  # a closed channel must not take the session's audio down
            log.warning("could not send %s event", event.get("type"), exc_info=True)
