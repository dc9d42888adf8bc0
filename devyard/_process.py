"""What every devyard daemon process does the same way: logging setup and signal handling.

The server, the host daemon and the connector each run until told to stop. The first SIGINT or
SIGTERM asks for a graceful stop (the daemon's *shutdown* event: drain, tell the peer, stop
instances); a second one stops at once (the daemon's task is cancelled). `run_until_signalled`
is that watcher, once; `setup_logging` is the one log setup; `tune_collector` the one
garbage-collector setting of a daemon.

Logs are one line per event, ``text`` (for people) or ``json`` (one object per line, for a
log pipeline: ``ts``, ``level``, ``logger``, ``message``, ``request_id`` when a request caused
it, ``exc`` with the traceback when there is one). `REQUEST_ID` is the id of the API request
being served (set by the server's request middleware); the handler's filter stamps it on every
record, so every line a request causes carries its id, whichever module logs it.
"""

from __future__ import annotations

import gc
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import partial
from typing import Final, TextIO, TypeVar

import attrs
import trio

__all__ = [
    "EXIT_INTERRUPTED",
    "LOG_FIELDS",
    "LOG_FORMAT",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "REQUEST_ID",
    "JsonFormatter",
    "RequestIdFilter",
    "Stopped",
    "run_until_signalled",
    "setup_logging",
    "text_formatter",
    "tune_collector",
]

#: The exit code of a daemon stopped by a second signal (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED: Final = 130
LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The ``--log-level`` choices of every command.
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
#: The ``--log-format`` choices of every command.
LOG_FORMATS: Final = ("text", "json")
#: The request id of the API request this task serves (None outside a request).
REQUEST_ID: ContextVar[str | None] = ContextVar("devyard_request_id", default=None)
#: Fields stamped on every line this task and its children log (a server's ``replica``).
LOG_FIELDS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("devyard_log_fields", default=())

log = logging.getLogger(__name__)

T = TypeVar("T")


class RequestIdFilter(logging.Filter):
    """Stamps `REQUEST_ID` on each record (as ``request_id``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        record.devyard_fields = LOG_FIELDS.get()
        return True


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        for name, value in getattr(record, "devyard_fields", ()):
            line += f" {name}={value}"
        request_id = getattr(record, "request_id", None)
        return line if request_id is None else f"{line} request_id={request_id}"


def text_formatter() -> logging.Formatter:
    """`LOG_FORMAT`, and `` request_id=...`` at the end of lines a request caused."""
    return _TextFormatter(LOG_FORMAT)


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            entry["request_id"] = request_id
        entry.update(getattr(record, "devyard_fields", ()))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str, *, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Log *level* and above (one of `LOG_LEVELS`) to *stream* (stderr), one line per event,
    as *fmt* (one of `LOG_FORMATS`)."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else text_formatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))


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


#: Allocations before a young collection (CPython's default is 700). A daemon holding
#: thousands of links keeps tens of thousands of long-lived objects, and with the default a
#: full collection walked all of them every few seconds: bench links' peers stalled up to
#: 4.6 s per collection at 4,000 links and lost links to keepalive timeouts (bench/README.md).
COLLECTOR_THRESHOLDS: Final = (50_000, 20, 100)


def tune_collector() -> None:
    """For a long-running daemon, once its modules are loaded: what exists now (imported
    modules, configuration) is frozen out of every later collection, and young collections
    run less often. Garbage is still collected; cycles of dropped links still go."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


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
