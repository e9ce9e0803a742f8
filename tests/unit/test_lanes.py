"""One model thread, two lanes (app.pipeline.lanes): a turn's work before drafts, whichever session asked first."""
import asyncio
import threading

import pytest

from app.pipeline.lanes import LanePool


def blocked_pool():
    """A pool whose thread is busy until the returned event is set, and the list its jobs append to."""
    pool, gate, started, ran = LanePool("test"), threading.Event(), threading.Event(), []
    pool.submit(lambda: (started.set(), gate.wait(5)))
    assert started.wait(5)
    return pool, gate, ran


def test_waiting_turn_work_starts_before_drafts_that_came_first():
    pool, gate, ran = blocked_pool()
    jobs = [pool.submit(ran.append, "draft A", speculative=True), pool.submit(ran.append, "draft B", speculative=True),
            pool.submit(ran.append, "turn C"), pool.submit(ran.append, "turn D")]
    assert pool.waiting() == (2, 2)
    gate.set()
    for job in jobs:
        job.result(5)
    assert ran == ["turn C", "turn D", "draft A", "draft B"]
    pool.shutdown()


def test_an_adopted_draft_is_promoted_ahead_of_other_drafts():
    pool, gate, ran = blocked_pool()
    other = pool.submit(ran.append, "other session's draft", speculative=True)
    mine = pool.submit(ran.append, "my draft, now my turn", speculative=True)
    turn = pool.submit(ran.append, "a later turn")
    pool.promote(mine)
    pool.promote(turn)     # already urgent: nothing changes
    gate.set()
    for job in (other, mine, turn):
        job.result(5)
    assert ran == ["my draft, now my turn", "a later turn", "other session's draft"]
    pool.shutdown()


def test_results_errors_cancels_and_shutdown_through_the_event_loop():
    pool = LanePool("test")

    async def scenario():
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(pool.urgent, pow, 2, 10) == 1024
        assert await loop.run_in_executor(pool.speculative, str.upper, "draft") == "DRAFT"
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(pool.urgent, divmod, 1, 0)

    asyncio.run(scenario())
    _, gate, _ = blocked = blocked_pool()
    waiting = blocked[0].submit(pow, 2, 3, speculative=True)
    blocked[0].shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    gate.set()
    with pytest.raises(RuntimeError, match="after shutdown"):
        blocked[0].submit(pow, 2, 3)
    pool.shutdown()


def generation(stop: threading.Event, started: threading.Event, ran: list, name: str) -> str:
    """A stand-in for a draft's generation: passes until it is told to stop."""
    started.set()
    for _ in range(100):
        if stop.is_set():
            ran.append(f"{name} gave way")
            return "cancelled"
        threading.Event().wait(0.01)
    ran.append(f"{name} finished")
    return "done"


def test_turn_work_interrupts_a_running_draft_unless_the_draft_was_adopted():
    pool, ran = LanePool("test"), []
    stop, started = threading.Event(), threading.Event()
    draft = pool.submit(generation, stop, started, ran, "draft", speculative=True, interrupt=stop.set)
    assert started.wait(5)
    turn = pool.submit(ran.append, "turn")
    assert draft.result(5) == "cancelled" and turn.result(5) is None
    assert ran == ["draft gave way", "turn"]

    ran.clear()
    stop, started = threading.Event(), threading.Event()
    adopted = pool.submit(generation, stop, started, ran, "adopted draft", speculative=True, interrupt=stop.set)
    assert started.wait(5)
    pool.promote(adopted)    # its session's turn ended on it: a caller waits for it now
    turn = pool.submit(ran.append, "turn")
    assert adopted.result(10) == "done" and turn.result(5) is None
    assert ran == ["adopted draft finished", "turn"]
    pool.shutdown()


def test_the_wait_of_a_callers_work_is_measured_from_when_a_caller_waits():
    pool, gate, _ = blocked_pool()
    assert pool.turn_wait_s() < 0.05             # the job that blocks it started at once
    draft = pool.submit(pow, 2, 3, speculative=True)
    threading.Event().wait(0.3)                  # a draft waits unnoticed: nobody waits for it yet
    pool.promote(draft)                          # now somebody does
    turn = pool.submit(pow, 3, 2)
    threading.Event().wait(0.1)
    gate.set()
    assert draft.result(5) == 8 and turn.result(5) == 9
    assert 0.08 <= pool.turn_wait_s() < 0.3      # the longest urgent wait, the draft's speculative time excluded
    pool.shutdown()


def test_a_wider_pool_runs_jobs_side_by_side_and_interrupts_a_draft_only_when_every_worker_is_busy():
    pool, ran = LanePool("test", width=2), []
    stop, started = threading.Event(), threading.Event()

    def draft_until_stopped():   # a draft that outlasts whatever a slow machine makes of this test
        started.set()
        if stop.wait(30):
            ran.append("draft gave way")
            return "cancelled"

    draft = pool.submit(draft_until_stopped, speculative=True, interrupt=stop.set)
    assert started.wait(5)
    both = threading.Barrier(2)   # passes only when two jobs run at once
    turn = pool.submit(both.wait, 5)
    assert both.wait(5) is not None and turn.result(5) is not None   # a worker was free: the draft went on
    assert not stop.is_set()

    gate, holding = threading.Event(), threading.Event()
    busy = pool.submit(lambda: (holding.set(), gate.wait(5)))   # now both workers are busy
    assert holding.wait(5)
    turn = pool.submit(ran.append, "turn")
    assert draft.result(5) == "cancelled" and turn.result(5) is None
    assert ran == ["draft gave way", "turn"]
    gate.set()
    busy.result(5)
    pool.shutdown()
    with pytest.raises(ValueError, match="width"):
        LanePool("test", width=0)
