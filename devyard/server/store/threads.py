"""Running blocking database calls in worker threads, with cancellation that really cancels.

Theory of operation. Both drivers (sqlite3, psycopg) block, so every store call runs one sync
function in a worker thread. `trio.to_thread.run_sync` offers two choices on cancellation,
neither right for a database: ``abandon_on_cancel=True`` returns at once but leaves the query
running and the connection busy behind our back; ``False`` waits, however long the query
takes. `run_interruptible` does what a database needs: when the calling task is cancelled it
keeps waiting for the thread, but first *interrupts the query* (SQLite's
``sqlite3_interrupt``, PostgreSQL's cancel request), so the thread comes back promptly with
the transaction rolled back and its connection clean, and then the task raises `Cancelled`.
If the work finished before the interrupt landed, its result is returned and the caller's
next checkpoint raises `Cancelled` (a committed write is reported, not hidden).

`Interruptible` is the per-call rendezvous between the trio task and the worker thread: the
worker `attach`es the connection it is using and `detach`es it before releasing it; the
interrupt (run in its own short-lived thread, because sending a PostgreSQL cancel request
blocks) acts only while a connection is attached, under the same lock. So a cancel request
can never reach a connection that has gone back to the pool and serves someone else.

Concurrency is bounded by the `trio.CapacityLimiter` each backend sizes to its connections,
never by trio's process-wide default thread limiter.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

if TYPE_CHECKING:
    import outcome  # trio's own dependency; only its types are used here

__all__ = ["Interrupted", "Interruptible", "run_interruptible"]

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C")


class Interrupted(Exception):
    """Raised in the worker when it notices the call was interrupted between statements."""


class Interruptible(Generic[C]):
    """Shared state of one call: which connection runs it and whether it was interrupted.

    ``interrupt_connection`` is the driver's way to stop whatever a connection is running;
    it is called from a worker thread, with the lock held.
    """

    def __init__(self, interrupt_connection: Callable[[C], None]) -> None:
        self._interrupt_connection = interrupt_connection
        self._lock = threading.Lock()
        self._connection: C | None = None
        self._interrupted = False

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def attach(self, connection: C) -> None:
        """Worker: ``connection`` now runs this call. Raises if already interrupted."""
        with self._lock:
            if self._interrupted:
                raise Interrupted
            self._connection = connection

    def detach(self) -> None:
        """Worker: the connection is about to be released; interrupts no longer reach it."""
        with self._lock:
            self._connection = None

    def check(self) -> None:
        """Worker, between statements: stop early if interrupted."""
        if self._interrupted:
            raise Interrupted

    def interrupt(self) -> None:
        """Any thread: stop the call. Idempotent; a no-op once detached."""
        with self._lock:
            self._interrupted = True
            if self._connection is not None:
                self._interrupt_connection(self._connection)


def _log_interrupt_failure(result: outcome.Outcome[None]) -> None:
    try:
        result.unwrap()
    except Exception as exc:
        # Nobody to raise to: the query then simply runs to its end.
        log.warning("could not interrupt a database call: %r", exc)


async def run_interruptible(fn: Callable[[], T], interruptible: Interruptible[C]) -> T:
    """Run ``fn()`` in a new worker thread; on cancellation, interrupt it and wait for it.

    Returns only once ``fn`` has returned, so whatever connection it used is idle again.
    The caller bounds concurrency (it holds a token of its backend's limiter).
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    raise_cancel: trio.lowlevel.RaiseCancelT | None = None

    def deliver(result: outcome.Outcome[T]) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    def abort(inner_raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        nonlocal raise_cancel
        raise_cancel = inner_raise_cancel
        trio.lowlevel.start_thread_soon(
            interruptible.interrupt, _log_interrupt_failure, name="devyard-store-interrupt"
        )
        return trio.lowlevel.Abort.FAILED

    trio.lowlevel.start_thread_soon(fn, deliver, name="devyard-store-worker")
    try:
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    except BaseException:
        if raise_cancel is not None:
            # The work failed because we interrupted it (or failed anyway while we were
            # cancelling): the cancellation is the story, the error its context.
            raise_cancel()
        raise
    return result
