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
