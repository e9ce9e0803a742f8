"""The brain's passes on the cores speech leaves idle (llm.openmp, PassBatcher.threads, app.pipeline.services):
a forward runs on the threads chosen for it, off the main thread, and leaves no OpenMP workers behind."""
import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch

import llm.passes
from app.pipeline import services as services_module
from app.pipeline.services import Services, _lend_idle_cores, served_threads
from llm import openmp
from llm.passes import Pass, PassBatcher
from tests.checkpoints import TINY_MASK, random_ids, tiny_block_model

needs_runtime = pytest.mark.skipif(not openmp.available(), reason="torch here is not on libgomp with OpenMP 5.0")


def os_threads() -> set[str]:
    return set(os.listdir(f"/proc/{os.getpid()}/task"))


def on_thread(fn):
    """fn() on a new thread (not the main one, as a model lane runs it) -> its result."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", fn()))
    thread.start()
    thread.join(30)
    return out["result"]


@needs_runtime
def test_ops_run_on_the_threads_asked_and_leave_no_workers_behind():
    big = torch.randn(400_000)

    def work():
        before, idle = torch.get_num_threads(), os_threads()
        with openmp.threads(2):
            inside = torch.get_num_threads()
            big.exp()        # a parallel region: libgomp starts this thread's worker
            started = os_threads() - idle
        return before, inside, torch.get_num_threads(), started, started & os_threads()

    own = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        before, inside, after, started, left = on_thread(work)
    finally:
        torch.set_num_threads(own)
    assert (before, inside, after) == (1, 2, 1)
    assert started            # the worker the region ran on
    assert not left           # handed back: the next thread's region is not throttled by it (llm.openmp)


@torch.no_grad()
def test_a_batchers_forward_runs_on_the_threads_its_policy_gives(monkeypatch):
    model = tiny_block_model()
    batcher, seen, real = PassBatcher(model, TINY_MASK), [], llm.passes.forward
    monkeypatch.setattr(llm.passes, "forward", lambda *a: (seen.append(torch.get_num_threads()), real(*a))[1])
    one = Pass(model.new_cache(1, 64), 0, torch.tensor(random_ids(8)))
    own = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        on_thread(lambda: batcher.run(one, slice(-1, None)))
        batcher.threads = lambda generations: 2
        hidden, logits = on_thread(lambda: batcher.run(Pass(one.cache, 8, torch.tensor(random_ids(2))),
                                                       slice(-1, None)))
    finally:
        torch.set_num_threads(own)
    assert seen == [1, 2 if openmp.available() else 1]
    assert logits.shape == (1, 64)


def fake_services(monkeypatch, cores: int, n_params: int = 135_000_000, asr_threads: int | None = None) -> Services:
    monkeypatch.setattr(services_module.os, "cpu_count", lambda: cores)
    engine = SimpleNamespace(device=torch.device("cpu"), model=SimpleNamespace(args=SimpleNamespace(n_params=n_params)),
                             batcher=SimpleNamespace(threads=None))
    asr = SimpleNamespace(options=SimpleNamespace(cpu_threads=asr_threads or services_module.asr_threads()))
    return Services(asr=asr, tts=None, engine=engine, toolbox=None, system_prompt=None)


@needs_runtime
def test_the_brain_gets_every_core_while_speech_has_nothing_to_do(monkeypatch):
    services = fake_services(monkeypatch, cores=2)
    own = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _lend_idle_cores(services)
        assert served_threads(services) == "threads: Whisper 1, LLM 1, 2 while speech is idle"   # app.bench's header
    finally:
        torch.set_num_threads(own)
    threads = services.engine.batcher.threads
    time.sleep(services_module.SPEECH_SETTLE_S)
    assert threads(1) == 2
    assert threads(2) == 1           # other callers' generations: their speech comes and goes between passes
    gate, started = threading.Event(), threading.Event()
    for lanes in (services.tts_lanes, services.asr_lanes, services.partial_lanes):
        job = lanes.submit(lambda: (started.set(), gate.wait(5)))
        assert started.wait(5)
        assert threads(1) == 1       # Piper or Whisper at work: the core is theirs
        gate.set()
        job.result(5)
        assert threads(1) == 1       # just done: two threads would be slow for a while yet (SPEECH_SETTLE_S)
        time.sleep(services_module.SPEECH_SETTLE_S)
        assert threads(1) == 2
        gate.clear(), started.clear()
    services.shutdown()


def test_no_cores_lent_where_whispers_pool_or_a_small_model_would_share_them(monkeypatch):
    own = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        two_whisper_threads = fake_services(monkeypatch, cores=2, asr_threads=2)
        _lend_idle_cores(two_whisper_threads)      # 2 cores, both taken while Whisper's pool stays
        small = fake_services(monkeypatch, cores=2, n_params=4_000_000, asr_threads=1)
        _lend_idle_cores(small)                    # its ops are too short to split
    finally:
        torch.set_num_threads(own)
    assert two_whisper_threads.engine.batcher.threads is None
    assert small.engine.batcher.threads is None
    assert services_module.asr_threads() == 1


@torch.no_grad()
def test_no_batch_runs_beside_an_exclusive_span():
    """A pass asked while another thread runs its own forwards (PassBatcher.exclusive: the base model's, for the
    end-of-turn judgement) waits for them: two forwards at once would share the same cores."""
    model = tiny_block_model()
    batcher, order = PassBatcher(model, TINY_MASK), []
    one = Pass(model.new_cache(1, 64), 0, torch.tensor(random_ids(8)))
    with batcher.exclusive():
        waiting = threading.Thread(target=lambda: (batcher.run(one, slice(-1, None)), order.append("batch")))
        waiting.start()
        waiting.join(0.3)
        order.append("exclusive")
    waiting.join(30)
    assert order == ["exclusive", "batch"]
