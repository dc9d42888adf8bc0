"""The client side of a link: one lifecycle for host daemons and connectors (docs/protocol.md
sections 7 and 10).

A link is one mux session from a host daemon or a connector to the server's edge. Its
lifecycle is the same for both kinds, and `run_link` is its only implementation:

    dial (bounded) -> hello (bounded by HELLO_TIMEOUT) -> registered | error
        registered        -> serve_registered(session, control, registered) until it returns
                             or raises; then reconnect with full-jitter backoff
        error{permanent}  -> raise LinkRefused (permanent): never retried
        anything else     -> reconnect with full-jitter backoff (LinkLost, broken transport,
                             a refusal that is not permanent)

A refusal reaches the client two ways and means the same either way: an HTTP status with the
API's ``{"message", "reason"}`` body on the upgrade (401 and 403 are permanent, for hosts and
connectors alike), or an ``error {code, message, permanent}`` control message. Both become a
`LinkRefused`. The caller's body raises `LinkLost` (``retry_now`` to skip the backoff once) or
a permanent `LinkRefused` for ends it recognises itself (a control ``error``, a GO_AWAY).

`shutdown` set means stop: before ``registered`` the attempt is cancelled; after it, the
body sees the same event and stops cleanly, and `run_link` returns instead of reconnecting.

Moving (a server that drains sends ``drain``, docs/protocol.md 7): the body calls
`hand_over`; `run_link` dials the next link at once (behind a load balancer it lands on
another replica) while the body goes on serving what is in flight on the old session; the
body waits for the event `hand_over` returned (the next link is registered; at most
`MOVE_OVERLAP`), and for its streams to end (`wait_streams_done`), and returns. Make before
break: no stream in flight is dropped.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from functools import partial
from typing import Any, Final, TypeVar

import trio

from ._errors import MuxError
from ._groups import leaves
from .backoff import Backoff
from .channel import ControlChannel
from .session import Session, open_session
from .transports import open_transport
from .upgrade import UpgradeRejected

log = logging.getLogger(__name__)

__all__ = [
    "CONNECTOR_PATH",
    "HELLO_TIMEOUT",
    "HOST_PATH",
    "MOVE_OVERLAP",
    "PROTO",
    "LinkLost",
    "LinkRefused",
    "LinkTarget",
    "ServeRegistered",
    "find_in_group",
    "hand_over",
    "race",
    "raise_for_error",
    "run_link",
    "wait_streams_done",
]

#: The control protocol's version, sent in ``hello`` and checked by the edge.
PROTO: Final = 1
#: The edge's routes for the two kinds of link (WebSocket or raw upgrade).
HOST_PATH: Final = "/v1/host_connections"
CONNECTOR_PATH: Final = "/v1/connector_connections"
#: How long either end waits for the other's ``hello`` / ``registered``.
HELLO_TIMEOUT: Final = 10.0
#: Upgrade refusals that mean "this credential will never be let in": no retry.
_PERMANENT_STATUS: Final = {401: "unauthorized", 403: "forbidden"}


class LinkRefused(Exception):
    """The edge refused this link, at the upgrade or with a control ``error`` message.

    ``code`` is the refusal's reason (the body's ``reason``, or the ``error``'s ``code``);
    ``permanent`` refusals end the link for good. ``status`` is the upgrade's HTTP status when
    the refusal came as one (for messages only), else None.
    """

    def __init__(
        self, code: str, message: str, *, permanent: bool, status: int | None = None
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.permanent = permanent
        self.status = status


class LinkLost(Exception):
    """The link dropped, or the edge answered something unexpected: reconnect with backoff
    (at once when *retry_now*, e.g. after GO_AWAY(relay restarting))."""

    def __init__(self, message: str, *, retry_now: bool = False) -> None:
        super().__init__(message)
        self.retry_now = retry_now


#: What a lost link usually raises; anything else is logged with its traceback (a bug).
_EXPECTED: Final = (
    LinkLost,
    LinkRefused,
    OSError,
    MuxError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.EndOfChannel,
    trio.TooSlowError,
    ValueError,  # a control message that is not JSON
)


#: The caller's part of a link: run until *shutdown* (then stop cleanly) or until the link
#: ends (return, or raise LinkLost / LinkRefused).
ServeRegistered = Callable[[Session, ControlChannel, dict[str, Any]], Awaitable[None]]

_E = TypeVar("_E", bound=BaseException)

#: How long a link that moved waits for the next one to register before it closes (once its
#: streams have ended): a lone server that drains refuses every new link, so none registers.
MOVE_OVERLAP: Final = 3.0
#: The hand-over of the link whose body this task runs (set by `run_link`, see `hand_over`).
_HAND_OVER: ContextVar[Callable[[], trio.Event] | None] = ContextVar(
    "devyard_link_hand_over", default=None
)


def hand_over() -> trio.Event | None:
    """Called by a registered body whose edge asked it to move (``drain``): `run_link` dials
    the next link now, and this body's end is only logged. Returns an event set once the next
    link is registered (or `run_link` stops); None outside a `run_link` body."""
    move = _HAND_OVER.get()
    return None if move is None else move()


async def wait_streams_done(session: Session) -> None:
    """Until no stream but the control stream is open on *session*, or it ended (bound it
    with a cancel scope)."""
    await session.wait_streams(1)


def raise_for_error(message: Mapping[str, Any]) -> None:
    """Raise the `LinkRefused` an ``error`` control message means; nothing for other types."""
    if message.get("type") != "error":
        return
    raise LinkRefused(
        str(message.get("code") or "error"),
        str(message.get("message") or ""),
        permanent=bool(message.get("permanent")),
    )


def _refused_upgrade(exc: UpgradeRejected) -> LinkRefused:
    reason, text = _PERMANENT_STATUS.get(exc.status_code, f"http-{exc.status_code}"), ""
    try:
        body = json.loads(exc.body or b"{}")
    except ValueError:
        body = None
    if isinstance(body, dict):  # {"message", "reason"}; older edges sent {"code", "message"}
        reason = str(body.get("reason") or body.get("code") or reason)
        text = str(body.get("message") or "")
    return LinkRefused(
        reason,
        text or f"upgrade refused with HTTP {exc.status_code}",
        permanent=exc.status_code in _PERMANENT_STATUS,
        status=exc.status_code,
    )


def find_in_group(
    exc: BaseException, kind: type[_E], where: Callable[[_E], bool] = lambda _: True
) -> _E | None:
    """*exc* itself, or the first exception of *kind* (satisfying *where*) inside a group."""
    if isinstance(exc, kind) and where(exc):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_in_group(inner, kind, where)
            if found is not None:
                return found
    return None


def describe(exc: BaseException) -> str:
    """A one-line account of why a link ended (groups of one unwrapped, causes followed)."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return describe(exc.exceptions[0])
    if str(exc):
        return str(exc)
    reason = exc.__cause__ or exc.__context__
    return type(exc).__name__ if reason is None else f"{type(exc).__name__}: {describe(reason)}"


async def race(*tasks: Callable[[], Awaitable[object]]) -> None:
    """Run *tasks* together; the first to return cancels the others (an error ends all)."""
    async with trio.open_nursery() as nursery:

        async def first(task: Callable[[], Awaitable[object]]) -> None:
            await task()
            nursery.cancel_scope.cancel()

        for task in tasks:
            nursery.start_soon(first, task)


async def _attempt(
    url: str,
    headers: list[tuple[bytes, bytes]],
    hello: Callable[[], Mapping[str, Any]],
    serve_registered: ServeRegistered,
    *,
    backoff: Backoff,
    shutdown: trio.Event,
    ssl_context: ssl.SSLContext | None = None,
    on_registered: Callable[[], None] = lambda: None,
) -> None:
    """One link: dial, hello, registered, the caller's body. Returns only on shutdown."""
    try:
        async with (
            open_transport(url, extra_headers=headers, ssl_context=ssl_context) as transport,
            open_session(transport, client=True) as session,
        ):
            with trio.CancelScope() as before_registered:

                async def cancel_on_shutdown() -> None:
                    await shutdown.wait()
                    before_registered.cancel()

                async with trio.open_nursery() as watcher:
                    watcher.start_soon(cancel_on_shutdown)
                    with trio.fail_after(HELLO_TIMEOUT):
                        control = ControlChannel(await session.open_stream())
                        await control.send(dict(hello()))
                        try:
                            reply = await control.receive()
                        except trio.EndOfChannel:
                            raise LinkLost("the edge closed the control stream") from None
                    watcher.cancel_scope.cancel()
            if before_registered.cancelled_caught:
                return
            raise_for_error(reply)
            if reply.get("type") != "registered":
                raise LinkLost(f"expected registered, got {reply.get('type')!r}")
            backoff.succeeded(trio.current_time())
            on_registered()
            await serve_registered(session, control, reply)
    except UpgradeRejected as exc:
        raise _refused_upgrade(exc) from None
    if not shutdown.is_set():
        raise LinkLost("the session ended")


#: Where each attempt dials: a fixed URL, or a callable awaited before each attempt (it may
#: wait; None means stop). Two links to different replicas use the callable
#: (`core.replica_links`, docs/scale-out.md "Two links").
LinkTarget = str | Callable[[], Awaitable[str | None]]


async def run_link(
    url: LinkTarget,
    token: str,
    hello: Callable[[], Mapping[str, Any]],
    serve_registered: ServeRegistered,
    *,
    backoff: Backoff,
    shutdown: trio.Event,
    label: Callable[[], str] = lambda: "",
    on_lost: Callable[[BaseException], None] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Hold a link to *url* until *shutdown* is set (returns) or a permanent refusal (raises
    that `LinkRefused`, unwrapped). *hello* builds each attempt's ``hello`` message; *token*
    goes in the upgrade's ``Authorization`` header, never in a log line. *label* prefixes the
    log lines (e.g. ``"tunnel=corp connector=con_1 "``); *on_lost* sees every loss that is
    followed by a reconnect. *ssl_context* verifies ``tls://`` and ``wss://`` servers (default:
    the system's trust store)."""
    headers = [(b"authorization", f"Bearer {token}".encode())]
    attempts = _Attempts(
        partial(
            _attempt,
            headers=headers,
            hello=hello,
            serve_registered=serve_registered,
            backoff=backoff,
            shutdown=shutdown,
            ssl_context=ssl_context,
        ),
        label,
    )
    permanent: LinkRefused | None = None
    async with trio.open_nursery() as moving:  # links that moved, finishing their streams
        while not shutdown.is_set():
            retry_now = False
            dial = url if isinstance(url, str) else await url()
            if dial is None:
                break
            log.debug("%sdialling %s", label(), dial)
            try:
                if await moving.start(attempts.run, dial):
                    log.info("%sthe server asked this link to move: dialling again", label())
                    continue
            except Exception as exc:
                permanent = find_in_group(exc, LinkRefused, lambda e: e.permanent)
                if permanent is not None:
                    log.error("%sstopping for good: %s", label(), permanent)
                    moving.cancel_scope.cancel()
                    break
                lost = find_in_group(exc, LinkLost, lambda e: e.retry_now)
                retry_now = lost is not None
                unexpected = any(not isinstance(e, _EXPECTED) for e in leaves(exc))
                log.warning(
                    "%slink to %s lost: %s", label(), dial, describe(exc), exc_info=unexpected
                )
                if on_lost is not None:
                    on_lost(exc)
            backoff.failed(trio.current_time())
            if shutdown.is_set():
                break
            delay = 0.0 if retry_now else backoff.next_delay()
            log.info("%sreconnecting in %.1f s", label(), delay)
            with trio.move_on_after(delay):
                await shutdown.wait()
        attempts.registered()  # no next link: a body still waiting for one stops waiting
    if permanent is not None:
        raise permanent from None


class _Attempts:
    """`run_link`'s attempts as tasks, and the hand-over between them (`hand_over`)."""

    def __init__(self, attempt: Callable[..., Awaitable[None]], label: Callable[[], str]) -> None:
        self._attempt = attempt
        self._label = label
        self._arrived = trio.Event()  # set when the next link registers

    def registered(self) -> None:
        self._arrived.set()
        self._arrived = trio.Event()

    async def run(self, url: str, *, task_status: trio.TaskStatus[bool]) -> None:
        """One attempt; reports False when it ends, or True early when its body hands over
        (what it raises after that is only logged: that link is done)."""
        moved = False

        def move() -> trio.Event:
            nonlocal moved
            if not moved:
                moved = True
                task_status.started(True)
            return self._arrived

        _HAND_OVER.set(move)
        try:
            await self._attempt(url, on_registered=self.registered)
        except Exception as exc:
            if not moved:
                raise
            log.info("%sthe link that moved ended: %s", self._label(), describe(exc))
        if not moved:
            task_status.started(False)
