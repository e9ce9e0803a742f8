"""One model's worker threads, shared by every session, with two lanes: the work of a turn the caller is waiting
for goes before speculative work (drafts started in the end-of-turn silence), whichever session asked first.

A model runs `width` jobs at a time: one for the speech models (calls to them are serialized, and on a small CPU
two at once only slow each other down); several for the language model, whose generations running at once
share their forward passes (llm.passes.PassBatcher). Waiting jobs start in order of (lane, arrival). When
every worker is busy, a running speculative job that can stop early (it was given `interrupt`, e.g. the Event
its generation checks between passes) is interrupted when urgent work arrives: a draft is cheap to redo, a
caller's wait is not. A draft that becomes the turn's own work is
promoted: its waiting jobs move to the urgent lane, in arrival order, and its running one is no longer
interrupted.
"""
import heapq
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Executor, Future

URGENT, SPECULATIVE = 0, 1


class LanePool:
    """An executor of `width` threads with an urgent and a speculative lane (`urgent` and `speculative` are
    Executors for loop.run_in_executor; `submit(..., speculative=True)` returns a Future that `promote` can move)."""

    def __init__(self, name: str, width: int = 1):
        if width < 1:
            raise ValueError(f"{name}: width={width} must be >= 1")
        self.name, self.width = name, width
        # heap of [lane, arrival, future, fn, args, kwargs, interrupt, since]: since, when a caller began to wait
        self._queue: list[list] = []
        self._running: list[list] = []        # the entries of the jobs running now
        self._waits: deque = deque(maxlen=8)  # (start time, seconds it waited) of the latest urgent jobs
        self._entries: dict[Future, list] = {}
        self._arrivals = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._idle_since = time.monotonic()   # when the last job ended with none waiting
        self.urgent = _Lane(self, URGENT)
        self.speculative = _Lane(self, SPECULATIVE)

    def submit(self, fn, /, *args, speculative: bool = False, interrupt=None, **kwargs) -> Future:
        """fn(*args, **kwargs) on the thread; interrupt (speculative only): a callable that makes fn return
        early, called when urgent work arrives while fn runs."""
        future: Future = Future()
        entry = [SPECULATIVE if speculative else URGENT, next(self._arrivals), future, fn, args, kwargs, interrupt,
                 time.monotonic()]
        with self._ready:
            if self._closed:
                raise RuntimeError(f"{self.name}: cannot schedule new work after shutdown")
            if len(self._threads) < self.width and len(self._running) + len(self._queue) >= len(self._threads):
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            heapq.heappush(self._queue, entry)
            self._entries[future] = entry
            if entry[0] == URGENT and len(self._running) >= self.width:
                stoppable = [running for running in self._running if running[0] == SPECULATIVE and running[6]]
                if stoppable:
                    stoppable[0][6]()
                    stoppable[0][6] = None    # once
            self._ready.notify()
        return future

    def promote(self, future: Future) -> None:
        """Move a speculative job to the urgent lane: a waiting one keeps its arrival, a running one is no longer
        interrupted."""
        with self._ready:
            entry = self._entries.get(future)
            if entry is not None and entry[0] == SPECULATIVE:
                entry[0], entry[7] = URGENT, time.monotonic()   # a caller waits for it from now
                if not any(entry is running for running in self._running):
                    heapq.heapify(self._queue)

    def turn_wait_s(self, window_s: float = 30.0) -> float:
        """The longest a caller's work waited for this thread, over its latest urgent jobs that started in the
        last window_s seconds (0 when none did): the load a new call would join."""
        now = time.monotonic()
        with self._ready:
            return max((wait for started, wait in self._waits if now - started <= window_s), default=0.0)

    def busy(self) -> bool:
        """Whether a job is running or waiting."""
        with self._ready:
            return bool(self._running or self._queue)

    def quiet_s(self) -> float:
        """Seconds since the last job ended with none running or waiting; 0 while one is."""
        with self._ready:
            return 0.0 if self._running or self._queue else time.monotonic() - self._idle_since

    def waiting(self) -> tuple[int, int]:
        """(urgent, speculative) jobs not yet started."""
        with self._ready:
            urgent = sum(1 for entry in self._queue if entry[0] == URGENT)
            return urgent, len(self._queue) - urgent

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        with self._ready:
            self._closed = True
            if cancel_futures:
                for entry in self._queue:
                    entry[2].cancel()
                self._queue.clear()
                self._entries.clear()
            self._ready.notify_all()
        if wait:
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                entry = heapq.heappop(self._queue)
                self._running.append(entry)
                if entry[0] == URGENT:
                    now = time.monotonic()
                    self._waits.append((now, now - entry[7]))
            future, fn, args, kwargs = entry[2:6]
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:   # the caller's future carries it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._ready:
                self._running = [running for running in self._running if running is not entry]
                self._entries.pop(future, None)
                if not self._running and not self._queue:
                    self._idle_since = time.monotonic()


class _Lane(Executor):
    """One lane of a LanePool, as an Executor (what loop.run_in_executor takes)."""

    def __init__(self, pool: LanePool, lane: int):
        self.pool = pool
        self.lane = lane

    def submit(self, fn, /, *args, **kwargs) -> Future:
        return self.pool.submit(fn, *args, speculative=self.lane == SPECULATIVE, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait, cancel_futures)
