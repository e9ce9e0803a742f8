"""The call lifecycle every transport shares (app.transports.base.Call): tasks, one close, failure -> error event."""
import asyncio

from app.transports.base import Call, PacingClock


class RecordingSession:
    def __init__(self):
        self.events: list[str] = []

    async def report_error(self, message: str) -> None:
        self.events.append(f"error: {message}")

    async def close(self) -> None:
        self.events.append("closed")


class ToyCall(Call):
    """A transport in a few lines: its medium is a list of what happened to it."""

    TRANSPORT = "toy"

    def __init__(self, closed_calls: list):
        super().__init__(on_closed=closed_calls.append)
        self.session = RecordingSession()
        self.medium: list[str] = []

    async def hang_up(self, reason: str, code: int) -> None:
        self.medium.append(f"hung up ({code}): {reason}")


def test_a_failed_task_tells_the_client_then_ends_the_call_once():
    async def scenario():
        closed: list[Call] = []
        call = ToyCall(closed)
        forever = call.spawn(asyncio.sleep(3600), "idle")

        async def broken():
            raise RuntimeError("microphone unplugged")

        call.spawn(broken(), "microphone")
        await asyncio.wait_for(call.wait_closed(), 5)
        await call.close("again")   # idempotent: nothing more happens
        await asyncio.sleep(0)
        return call, closed, forever

    call, closed, forever = asyncio.run(scenario())
    assert call.session.events == ["error: the call failed: toy-#%x-microphone failed (RuntimeError)" % id(call),
                                   "closed"]
    assert call.medium == ["hung up (1011): toy-#%x-microphone failed (RuntimeError)" % id(call)]
    assert closed == [call] and forever.cancelled()


def test_a_call_that_ends_normally_reports_no_error():
    async def scenario():
        call = ToyCall([])
        await call.close("the caller hung up")
        return call

    call = asyncio.run(scenario())
    assert call.session.events == ["closed"] and call.medium == ["hung up (1000): the caller hung up"]


def test_the_pacing_clock_keeps_real_time_and_resyncs_after_a_stall():
    async def scenario():
        clock = PacingClock(0.01)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(11):
            await clock.wait()
        paced_s = loop.time() - start
        await asyncio.sleep(0.5)                 # a stall far past MAX_LATE_S: no burst of missed frames
        before = loop.time()
        await clock.wait()
        await clock.wait()
        return paced_s, loop.time() - before, clock.frames

    paced_s, after_stall_s, frames = asyncio.run(scenario())
    assert 0.09 <= paced_s < 0.3 and frames == 12
    assert after_stall_s >= 0.005   # the frame after the resync waits its turn again
