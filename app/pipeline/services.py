"""The models and tools, loaded once per process and shared by every session."""
import ctypes
import logging
import os
import threading
import time
from dataclasses import dataclass, field

import torch

import llm
from app.agent.loop import Agent
from app.agent.options import AgentOptions, agent_options_for
from app.agent.profile import load_profile
from app.agent.prompt import recognizer_prompt, system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.pipeline.lanes import LanePool
from app.pipeline.names_heard import NamesHeard
from app.settings import Settings
from llm import openmp
from llm.caches import KEPT_CACHES
from llm.quant import weight_format
from speech.asr import AsrOptions, Transcriber
from speech.tts import Synthesizer
from speech.vad import VadConfig

log = logging.getLogger(__name__)


@dataclass
class Services:
    asr: object                     # speech.asr.Transcriber (or anything with .transcribe(int16 16 kHz) -> str)
    tts: object                     # speech.tts.Synthesizer
    engine: object                  # llm.Engine
    toolbox: object                 # app.agent.tools.Toolbox
    system_prompt: str | None
    vad_config: VadConfig = field(default_factory=VadConfig)
    agent_options: AgentOptions = field(default_factory=AgentOptions)
    # Generations run at once (Settings.llm_batch). On a CPU a forward over the rows of four generations took 2.1x
    # less time than their four one by one (one-row passes; 1.6x for four-row ones: SmolLM2-135M in fp16, 2 AVX2
    # cores); more rows than that are bound by the products' arithmetic rather than by reading the weights.
    llm_batch: int = 4
    ready: bool = False

    def __post_init__(self):
        # Worker threads per model, shared by every session: the event loop never waits on a model, and a turn's
        # work goes before drafts (app.pipeline.lanes). The speech models run one call at a time; the language
        # model up to llm_batch generations, whose passes share forwards (llm.passes.PassBatcher). A partial
        # transcript never delays the final one (its own thread).
        self.asr_lanes, self.tts_lanes = LanePool("asr"), LanePool("tts")
        self.llm_lanes = LanePool("llm", width=self.llm_batch)
        self.asr_pool, self.llm_pool, self.tts_pool = (lanes.urgent for lanes in (self.asr_lanes, self.llm_lanes,
                                                                                  self.tts_lanes))
        self.partial_lanes = LanePool("asr-partial")
        self.partial_pool = self.partial_lanes.urgent
        self.conversations = 0   # calls' sessions going on (conversation_started)
        self._conversations_lock = threading.Lock()

    def conversation_started(self) -> None:
        """A call's session began: the brain keeps an idle KV cache for every conversation going on, and one more
        (a call that just ended, a text request), at least its default (llm.Engine.keep_caches); as calls end, their
        caches go first (conversation_ended), so memory follows the calls, not the most a server admits."""
        self._count_conversations(+1)

    def conversation_ended(self, conversation=None) -> None:
        """A call's session ended; `conversation`, its agent, if the brain kept its KV cache (its cache goes first)."""
        if conversation is not None:
            self.engine.conversation_over(conversation)
        self._count_conversations(-1)

    def _count_conversations(self, change: int) -> None:
        with self._conversations_lock:
            self.conversations += change
            self.engine.keep_caches(max(KEPT_CACHES, self.conversations + 1))   # the engine's default, at least

    def idle(self) -> bool:
        """Whether no model has work running or waiting."""
        return not (self.speech_busy() or self.llm_lanes.busy())

    def speech_busy(self) -> bool:
        """Whether Whisper or Piper is working or has work waiting."""
        return any(lanes.busy() for lanes in self._speech_lanes())

    def speech_quiet_s(self) -> float:
        """Seconds since Whisper and Piper last had work; 0 while they do."""
        return min(lanes.quiet_s() for lanes in self._speech_lanes())

    def _speech_lanes(self) -> tuple[LanePool, ...]:
        return self.asr_lanes, self.partial_lanes, self.tts_lanes

    @classmethod
    def load(cls, settings: Settings, speech: bool = True) -> "Services":
        """Load the ASR, TTS and LLM named by the settings, and the business tools; speech=False: the LLM and the
        tools alone (a text conversation)."""
        t0 = time.perf_counter()
        profile = load_profile(settings.profile)
        # the recognizer expects the business's own words: "blow dry", not "blow drive"
        asr = (Transcriber(AsrOptions(model_dir=settings.asr_model, prompt=recognizer_prompt(profile),
                                      cpu_threads=asr_threads())) if speech else None)
        tts = Synthesizer(settings.voice, threads=tts_threads()) if speech else None
        engine = llm.load(settings.llm_model, device=settings.llm_device)
        if speech:   # a core left to ASR and TTS; a text conversation keeps torch's choice (or --threads)
            _size_cpu_threads(engine)
        toolbox = Toolbox(profile, open_store(settings.db_path))
        services = cls(asr, tts, engine, toolbox, system_prompt(profile, toolbox, engine.chat_style),
                       agent_options=agent_options_for(settings.llm_model), llm_batch=settings.llm_batch)
        if speech:
            services.asr = NamesHeard(asr, services.booked_names)
            _lend_idle_cores(services)
            # the OpenMP workers loading started on this thread: the passes run on the LLM's threads (llm.openmp);
            # `parley serve` warms up on another thread, so here and not in warm_up
            openmp.release()
        log.info("models loaded in %.1f s (llm %s, %s, %s %s)", time.perf_counter() - t0, settings.llm_model,
                 engine.chat_style, engine.device, weight_format(engine.model))   # bf16 or fp16 weights: llm.quant
        return services

    def new_agent(self) -> Agent:
        """A fresh conversation on these models and tools (a call, an API request)."""
        return Agent(self.engine, self.toolbox, self.system_prompt, self.agent_options)

    def booked_names(self) -> list[str]:
        """The names of the upcoming bookings, soonest first (the recognizer hears them as booked: NamesHeard)."""
        return [a.name for a in self.toolbox.store.upcoming(self.toolbox.now())]

    def warm_up(self) -> None:
        """One small pass through each model loaded, so the first turn pays no one-time costs."""
        t0 = time.perf_counter()
        # the models' own warm-ups: a transcript of zeros is "" before Whisper runs at all, so it warmed nothing
        for model in (self.asr, self.tts):
            if model is not None:   # a text conversation loads no speech models
                model.warm_up()
        # The agent's own first generation of a turn, without history or tools: its decoding path, the system
        # prompt left in a reused KV cache (cache "block"), and the reply grammar (the tokenizer's index, ~0.4 s,
        # built once). The first call's first turn was ~1 s slower than the next without it.
        agent = self.new_agent()
        agent.draft("Hello, what are your hours?")
        # what the draft wrote after the system prompt is no caller's: the first caller's turn then takes the cache
        # holding the system prompt, not a new one (llm.caches)
        self.engine.hold_only(agent.prompt())
        _return_freed_memory()
        self.ready = True
        log.info("models warm in %.1f s", time.perf_counter() - t0)

    def shutdown(self) -> None:
        for pool in (self.asr_lanes, self.partial_lanes, self.llm_lanes, self.tts_lanes):
            pool.shutdown(wait=False, cancel_futures=True)


def _return_freed_memory() -> None:
    """Hand the memory that loading freed (the GGUF's dequantized copies, the weights' first layout) back to the
    OS: glibc keeps freed heap pages for reuse, and they stayed in `parley serve`'s resident size (1.67 GB with the
    SmolLM2 brain, against 1.2 GB after this). Nothing to do off glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# NOTE: a small model's CPU ops are too short to split: on 2 cores a 4M-parameter pass ran 3-20x slower on two
# threads than on one (llm bench), and one thread leaves the other core to ASR and TTS.
SMALL_MODEL_PARAMS = 100_000_000


def _size_cpu_threads(engine) -> None:
    """The LLM's torch threads, for a process that also runs ASR (CTranslate2) and TTS (onnxruntime) pools.

    NOTE: SmolLM2-135M on 2 AVX2 cores: a pass over 4 new positions took 123 ms on one thread and 118 ms on two
    (a 300-token prefill 1.7 s against 0.8 s), and two busy pools on 2 cores make OpenMP spin (a decode step
    measured 39 ms on one thread, 725 ms on two while another process used a core). So the LLM leaves a core
    to speech: one thread on 2 cores, all but one on more.
    """
    if engine.device.type == "cpu":
        torch.set_num_threads(_own_threads(engine))


def _own_threads(engine) -> int:
    return 1 if engine.model.args.n_params < SMALL_MODEL_PARAMS else max(1, (os.cpu_count() or 2) - 1)


def idle_speech_threads(engine, asr_threads: int) -> int:
    """The LLM's torch threads for a pass while Whisper and Piper have nothing to do and one generation runs
    (_lend_idle_cores): every core libgomp's budget leaves, where that is more than its own."""
    own = _own_threads(engine)
    if engine.model.args.n_params < SMALL_MODEL_PARAMS or not openmp.available():
        return own
    return max(own, (os.cpu_count() or 1) - (asr_threads - 1))


def served_threads(services: Services) -> str:
    """The threads each model got, in words (what a benchmark's figures were measured with)."""
    engine, lent = services.engine, services.engine.batcher.threads is not None
    idle = idle_speech_threads(engine, services.asr.options.cpu_threads) if lent else None
    llm_threads = "its device" if engine.device.type != "cpu" else (
        f"{torch.get_num_threads()}" + (f", {idle} while speech is idle" if lent else ""))
    return f"threads: Whisper {services.asr.options.cpu_threads}, LLM {llm_threads}"


def asr_threads() -> int:
    """Whisper's CTranslate2 threads in a process that serves calls: one on 2 cores, CTranslate2's default (up to
    4) on more.

    NOTE: on 2 cores of a Xeon, Whisper tiny.en took 99-107 ms an utterance on one thread against 120-128 ms on two
    (three Piper-spoken questions, 2026-12-06), and a second OpenMP pool that stays would cost the brain's
    passes the other core (_lend_idle_cores)."""
    cores = os.cpu_count() or 1
    return 1 if cores <= 2 else AsrOptions().cpu_threads


def tts_threads() -> int:
    """Piper's onnxruntime threads in a process that serves calls: one on 2 cores, onnxruntime's default (a thread a
    physical core) on more; none spins (speech.tts.voice_session).

    NOTE: on 2 cores Piper's two spinning threads took a core from the brain's passes and from Whisper whenever a
    reply was synthesized beside them (speech.tts.voice_session). Phone callers at once (app.loadtest, 2 AMD EPYC
    cores, 2026-12-06, the same hour, both with llm.engine's cache choice of that day): p95 1340 / 1260 ms with two
    callers and 1320 with four, against 1560 / 1464 and 1479 with Piper on onnxruntime's defaults. A lone caller
    pays for it where the first phrase is not drafted: `app.bench`'s tts_ttfb 136 ms against 105 without drafting,
    e2e 605 against 589 ms with the default policy (where the draft synthesizes it during the silence)."""
    return 1 if (os.cpu_count() or 1) <= 2 else 0


# A pass lent both cores waits until speech work has been over this long. NOTE: the brain's two-thread passes right
# after a Whisper run were slow (2 AMD EPYC cores, 2026-12-07, a 15-row pass in one process): 42 ms when the run had
# just ended, 35 ms 20 ms later, 29-30 from 50 ms on, against 26-27 on one thread and 18-19 for a two-thread pass
# right after another; three passes from the run's end took 93 ms on two threads each, 73 ms as 1, 1 then 2. In
# `app.bench`'s lone-caller drafts the first pass after Whisper took 28 ms on one thread against 50-54 on two, and
# the drafts ended a median 18 ms sooner.
SPEECH_SETTLE_S = 0.05


def _lend_idle_cores(services: Services) -> None:
    """While Whisper and Piper have nothing to do and one generation runs (a caller's silence: the draft's
    reply, the end-of-turn judgement), the brain's passes run on every core the process's OpenMP budget leaves
    them, not only on the threads _size_cpu_threads gave it; each pass checks again, so speech that starts waits one
    pass at most. With other callers' generations running, their speech work comes and goes between passes, and a
    pass on both cores that Piper's threads start beside is slower for both: four phone callers at once (app.loadtest)
    waited a p95 of 4.2 and 5.2 s in two runs against 4.3 and 2.8 s for one thread, until passes on both cores were
    kept to one generation (4.2 and 3.5 s; one caller's median 1.16-1.18 s against 1.34-1.40 s, 2026-12-06).

    The budget: libgomp wakes its workers for every region once it manages more threads than there are CPUs
    (llm.openmp), and Whisper's pool keeps its threads less one as workers. So on 2 cores, with Whisper on one thread, a
    pass gets both cores. NOTE: `python -m app.bench --repeats 2` on 2 Xeon cores (2026-12-06), then the code before:
    llm_ms a turn 412-421 against 544-570 on one thread, e2e 843 against 978 ms with the default policy.
    """
    engine = services.engine
    if engine.device.type != "cpu":
        return
    own, idle = _own_threads(engine), idle_speech_threads(engine, services.asr.options.cpu_threads)
    if idle <= own:
        return
    engine.batcher.threads = lambda generations: (
        idle if generations <= 1 and services.speech_quiet_s() >= SPEECH_SETTLE_S else own)
