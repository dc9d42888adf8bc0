"""What every devyard daemon process does the same way: logging setup and signal handling.

The server, the host daemon and the connector each run until told to stop. The first SIGINT or
SIGTERM asks for a graceful stop (the daemon's *shutdown* event: drain, tell the peer, stop
instances); a second one stops at once (the daemon's task is cancelled). `run_until_signalled`
is that watcher, once; `setup_logging` is the one log format.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Final, TextIO, TypeVar

import attrs
import trio

__all__ = [
    "EXIT_INTERRUPTED",
    "LOG_FORMAT",
    "LOG_LEVELS",
    "Stopped",
    "run_until_signalled",
    "setup_logging",
]

#: The exit code of a daemon stopped by a second signal (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED: Final = 130
LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The ``--log-level`` choices of every command.
LOG_LEVELS: Final = ("debug", "info", "warning", "error")

log = logging.getLogger(__name__)

T = TypeVar("T")


def setup_logging(level: str, *, stream: TextIO | None = None) -> None:
    """Log *level* and above (one of `LOG_LEVELS`) to *stream* (stderr) in `LOG_FORMAT`."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        stream=sys.stderr if stream is None else stream,
        format=LOG_FORMAT,
    )


@attrs.frozen
class Stopped:
    """How `run_until_signalled` ended when *main* did not return: the signal's name."""

    signal: str


async def _watch(
    receiver: AsyncIterator[int],
    shutdown: trio.Event,
    stop_now: trio.CancelScope,
    graceful: str,
    stopped: list[Stopped],
) -> None:
    async for signum in receiver:
        name = signal.Signals(signum).name
        if shutdown.is_set():
            log.warning("%s again: stopping now", name)
            stopped.append(Stopped(name))
            stop_now.cancel()
            return
        log.info("%s: %s (a second signal stops at once)", name, graceful)
        shutdown.set()


async def run_until_signalled(
    main: Callable[[trio.Event], Awaitable[T]], *, graceful: str = "stopping"
) -> T | Stopped:
    """Run ``main(shutdown)``: the first SIGINT/SIGTERM sets *shutdown* (and logs *graceful*,
    what the daemon now does), a second one cancels *main* and returns `Stopped`. What *main*
    raises propagates unwrapped."""
    shutdown = trio.Event()
    stopped: list[Stopped] = []
    result: list[T] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as receiver:
        try:
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    result.append(await main(shutdown))
                    nursery.cancel_scope.cancel()

                watch = partial(_watch, receiver, shutdown, nursery.cancel_scope)
                nursery.start_soon(watch, graceful, stopped)
                nursery.start_soon(run)
        except BaseExceptionGroup as group:  # main's own error (the watcher raises nothing)
            if len(group.exceptions) != 1:
                raise
            inner = group.exceptions[0]
            try:
                raise inner from inner.__cause__
            finally:
                del inner
    return result[0] if result else stopped[0] if stopped else Stopped("?")
