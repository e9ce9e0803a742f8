"""Session's work during the end-of-turn silence: drafting and the end-of-turn judgement.

From `speculate_ms` of silence (`speculate_idle_ms` while no model has work) a draft transcribes the utterance,
asks the language model whether the turn is complete (SessionOptions.end_of_turn, speech.endpoint), drafts the
agent's answer up to its first phrase (through the tools' previews: the hours and prices read, a booking checked
but not made; app.agent.loop.Agent.draft) and synthesizes that phrase, all without side effects (a booking is made
only after the endpoint). A lone caller's judgement runs beside that synthesis instead of before the answer. If the
caller goes on, the draft is dropped; if the turn ends with these words, the turn starts from it and the reply goes
on from its first phrase.
A mixin of app.pipeline.session.Session, whose state it uses: options, services, agent, detector, _loop, _draft,
_policy, _carry, _ready_clause.
"""
import asyncio
import functools
import logging
import threading
from dataclasses import dataclass, field

import numpy as np

from app.pipeline.lanes import LanePool
from app.pipeline.trace import TurnTrace
from speech.tts import ClauseSplitter
from speech.vad import SpeechEnd

log = logging.getLogger(__name__)


@dataclass
class Draft:
    """Work started during the end-of-turn silence, valid while the utterance stays the same."""
    audio_samples: int                 # length of the utterance it was computed on
    cancel: threading.Event
    transcript: asyncio.Future         # -> the transcript, as soon as ASR is done
    p_complete: asyncio.Future | None  # -> the model's P(the turn is complete), or None without one
    task: asyncio.Task | None = None   # -> (DraftedTurn | None, first clause | None, its audio | None)
    adopted: bool = False              # the turn ended on this utterance: the draft's work is the turn's
    yielded: threading.Event = field(default_factory=threading.Event)   # its generation gave way to a turn
    jobs: list = field(default_factory=list)   # (LanePool, Future) of the model work it asked for

    def drop(self) -> None:
        """The utterance went on or the turn stopped: stop the generation, and its jobs still waiting never run."""
        self.cancel.set()
        for _, job in self.jobs:
            job.cancel()

    def adopt(self) -> None:
        """The caller now waits for this work: its jobs still waiting move to the urgent lane (app.pipeline.lanes)."""
        self.adopted = True
        for lanes, job in self.jobs:
            lanes.promote(job)


class EitherEvent:
    """Set when any of the events is (what a generation's `cancel` needs: is_set)."""

    def __init__(self, *events: threading.Event):
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


class Drafting:
    """Drafts and the end-of-turn decision (see the module)."""

    async def _judged(self) -> None:
        """Input faster than real time (a file): the judgement takes no stream time, so wait for it."""
        draft = self._draft
        if draft is not None and draft.p_complete is not None:
            await asyncio.shield(draft.p_complete)

    def _decided_end(self) -> SpeechEnd | None:
        """With an end-of-turn policy: the turn ends here once its silence reached the wait the policy chose from
        the draft's P(complete) (the plain VAD's while no draft judged it; the longest while one is judging)."""
        policy, draft = self._policy, self._draft
        if policy is None or not self.detector.in_speech or self.detector.trailing_silence_ms < policy.check_ms:
            return None
        if draft is None or draft.p_complete is None:
            wait = policy.silence_ms
        elif not draft.p_complete.done():
            wait = policy.max_silence_ms
        else:
            p = draft.p_complete.result()
            wait = policy.silence_ms if p is None else policy.wait_ms(p)
        return self.detector.end_now() if self.detector.trailing_silence_ms >= wait else None

    def _maybe_draft(self) -> None:
        if self.options.speculate_ms is None or not self.detector.in_speech:
            return
        silence_ms = self.detector.trailing_silence_ms
        if silence_ms == 0 and self._draft is not None:      # the user went on speaking: the draft is stale
            self._draft.drop()
            self._draft = None
        elif self._draft is None and self._drafts_now(silence_ms):
            audio = self.detector.endpoint_audio()
            draft = Draft(len(audio), threading.Event(), self._loop.create_future(),
                           self._loop.create_future() if self._policy is not None else None)
            draft.task = asyncio.create_task(self._make_draft(np.concatenate([self._carry, audio]), draft))
            self._draft = draft

    def _drafts_now(self, silence_ms: int) -> bool:
        """Whether a draft starts at this silence: from speculate_ms, or from speculate_idle_ms while no model has
        work."""
        early = self.options.speculate_idle_ms
        return silence_ms >= self.options.speculate_ms or (
            early is not None and silence_ms >= early and self.services.idle())

    async def _make_draft(self, audio: np.ndarray, draft: Draft):
        """Transcript, P(the turn is complete), the answer up to its first phrase and that phrase's audio, with no
        side effects (tools that change something run only later)."""
        try:
            return await self._drafting(audio, draft)
        finally:
            if draft.p_complete is not None and not draft.p_complete.done():
                draft.p_complete.set_result(None)   # no judgement: the plain VAD's wait

    async def _drafting(self, audio: np.ndarray, draft: Draft):
        services, cancel = self.services, draft.cancel
        try:
            text = await self._speculate(services.asr_lanes, draft, services.asr.transcribe, audio)
        except Exception as exc:
            draft.transcript.set_exception(exc)
            raise
        draft.transcript.set_result(text)
        if cancel.is_set() or not text.strip():
            return None, None, None
        heard = self._heard_unprompted(draft, audio)
        try:
            return await self._answered(draft, text, heard)
        finally:
            if heard is not None:
                heard.cancel()   # a draft that stopped before its judgement: that decode is not needed

    def _heard_unprompted(self, draft: Draft, audio: np.ndarray) -> asyncio.Task | None:
        """The words as Whisper hears them without the business's words in its prompt, which the end-of-turn
        judgement reads (None without a policy): with them, Whisper finishes a sentence the caller left unfinished
        ("We're looking for a table for" heard "a table for it."). A decode of the encoding the draft's transcript
        made, beside the draft's generation. Only while no other generation runs or waits: under load the
        transcript is judged, and that decode's CPU goes to the callers' turns.
        NOTE: `python -m speech.bench endpoint` (2026-12-07): 19.4% of paused turns cut off against 25.9% judged on
        the prompted transcript, complete turns waiting the same (300 ms, median)."""
        if draft.p_complete is None or self.services.llm_lanes.busy():
            return None
        unprompted = functools.partial(self.services.asr.transcribe, prompted=False)
        return asyncio.ensure_future(self._speculate(self.services.asr_lanes, draft, unprompted, audio))

    async def _answered(self, draft: Draft, text: str, heard: asyncio.Task | None):
        """The draft from its transcript on: the judgement (of `heard`), the answer's first phrase and its audio."""
        services, cancel = self.services, draft.cancel
        # The judgement goes first while other calls' generations run: the decision adopts the draft, whose work then
        # goes before theirs. With no other generation, after the first phrase, beside its synthesis: the reply could
        # not start before that phrase's audio anyway.
        # NOTE: `python -m app.bench` (2 AMD EPYC cores, 2026-12-06), a lone caller: e2e 518 / 472 ms against 566 /
        # 602 with the judgement first, the turn decided ~450 ms into its silence instead of ~300.
        if services.llm_lanes.busy() or not self.options.answer_turns:
            await self._judge(draft, text, heard)
        if not self.options.answer_turns:
            return None, None, None     # the transport answers when it chooses: no first answer to draft
        # The draft stops once its first phrase is written (the turn goes on from there, when the agent can), or
        # when another session's turn interrupts it (written again, or gone on from, if this utterance ends the turn).
        splitter, clauses, phrased = ClauseSplitter(self.options.first_phrase_words), [], threading.Event()
        stops_at_phrase = self.options.speak and getattr(self.agent, "resumes_drafts", False)

        def on_text(piece: str) -> None:   # on the model's thread
            if not clauses:
                clauses.extend(splitter.push(piece))
                if clauses and stops_at_phrase:
                    phrased.set()

        drafted = await self._speculate(services.llm_lanes, draft, self.agent.draft, text,
                                        EitherEvent(cancel, draft.yielded, phrased), on_text,
                                        interrupt=draft.yielded.set)
        if cancel.is_set():
            return None, None, None
        if drafted is None:   # no drafts
            await self._judge(draft, text, heard)
            return None, None, None
        finished = drafted.steps[-1].generation.stopped != "cancelled"
        clause = clauses[0] if clauses else splitter.flush() if finished else None
        if not clause or not self.options.speak:
            await self._judge(draft, text, heard)
            return drafted, None, None
        judged = asyncio.ensure_future(self._judge(draft, text, heard))
        clause_audio = await self._speculate(services.tts_lanes, draft, services.tts.synthesize, clause)
        await judged
        return drafted, clause, clause_audio

    async def _judge(self, draft: Draft, text: str, heard: asyncio.Task | None) -> None:
        """The draft's P(the turn is complete), when the session has an end-of-turn policy: of the words `heard`
        without the prompt, or of `text` (the draft's transcript) where that heard none."""
        if draft.p_complete is None or draft.p_complete.done():
            return
        try:
            text = (await heard if heard is not None else "") or text
            judge = self.services.engine.end_of_turn_probability
            p = await self._speculate(self.services.llm_lanes, draft, judge, text)
        except Exception:
            log.exception("end-of-turn judgement failed; the VAD decides")
            return
        if not draft.p_complete.done():
            draft.p_complete.set_result(p)
        if self._draft is draft and (end := self._decided_end()) is not None:
            self._end_turn(end)   # now, not at the next 20 ms frame: the phrase's audio is ready by then

    @staticmethod
    async def _speculate(lanes: LanePool, draft: Draft, fn, *args, interrupt=None):
        """fn(*args) on the model's thread: in the speculative lane until the draft is adopted, then urgent."""
        job = lanes.submit(fn, *args, speculative=not draft.adopted, interrupt=interrupt)
        draft.jobs.append((lanes, job))
        return await asyncio.wrap_future(job)

    async def _transcribe(self, audio: np.ndarray, draft: Draft | None) -> str:
        """The final transcript: the draft's when it matches this turn (often ready before the endpoint)."""
        if draft is not None:
            try:
                return await draft.transcript
            except Exception:
                log.exception("drafted transcript failed; transcribing again")
        return await self._loop.run_in_executor(self.services.asr_pool, self.services.asr.transcribe, audio)

    async def _drafted_turn(self, draft: Draft, trace: TurnTrace):
        """The draft's answer, an app.agent.loop.DraftedTurn (and its first clause's audio, kept for _speak), or
        None."""
        try:
            first, clause, clause_audio = await draft.task
        except Exception:
            log.exception("draft failed; generating again")
            return None
        trace.drafted = first is not None
        self._ready_clause = (clause, clause_audio) if clause else None
        return first
