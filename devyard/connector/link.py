"""The connector: holds a tunnel for the server and dials destinations in this network.

Theory of operation
-------------------
`serve_connector` dials ``ws(s)://SERVER/v1/connector_connections`` with the tunnel token in
the upgrade's ``Authorization`` header (never in the URL, never logged), runs a mux session
and opens the control stream (docs/protocol.md 7): ``hello {replace}`` -> ``registered {role,
selectors}``. It then serves the streams the edge opens: ``probe`` (answered ok, no dial) and
``tunnel-dial`` (``dest`` checked against the selectors *here* too, resolved with this
machine's DNS, dialled with a bounded timeout, answered ok or with a coded error, then
spliced). A standby serves nothing until ``promote``.

Selectors: every version seen since the process started is kept (a few), and a dial is checked
against the version the edge names, so instances attached before a selector change keep theirs
until this connector restarts (spec 4.6 rule 3).

The lifecycle (dial, hello, reconnect with full-jitter backoff, exit for good) is
`devyard.core.link.run_link`; `_Link` is the connector's registered body. It serves until the
first of: the control stream ends, the session ends, or `shutdown`. Ends: a permanent end (401
or 403 on the upgrade, ``error {permanent}``, or a "do not retry" GO_AWAY) raises
`PermanentError`, whose ``exit_code`` the process returns; anything else reconnects, at once
after GO_AWAY(relay restarting). `shutdown` set means drain: ``shutdown`` on the control
stream and GO_AWAY(connector clean stop) first (the edge stops routing here and promotes a
standby), then streams in flight get ``grace`` seconds; cancelling the caller's scope stops at
once.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import secrets
import socket
import sys
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from .. import __version__
from ..core import (
    FIRST_RETRY_S,
    Backoff,
    ControlChannel,
    GoAwayCode,
    Session,
    accept_open,
    read_open,
    reject_open,
    splice,
)
from ..core.link import (
    CONNECTOR_PATH,
    MOVE_OVERLAP,
    PROTO,
    LinkLost,
    LinkRefused,
    find_in_group,
    hand_over,
    race,
    raise_for_error,
    run_link,
    wait_streams_done,
)
from ..core.replica_links import LinkSlots
from ..core.selectors import SelectorError, SelectorHistory, parse_dest, parse_selectors
from ..core.tls import client_context
from ..core.transports import link_url
from ._errors import EXIT_CODES, PermanentError, permanent_for_code, permanent_for_go_away
from .metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["CONNECTOR_CONNECTIONS_PATH", "ConnectorConfig", "serve_connector"]

CONNECTOR_CONNECTIONS_PATH: Final = CONNECTOR_PATH
_OPEN_TIMEOUT: Final = 10.0
_SAY_GRACE: Final = 2.0
_PING_INTERVAL: Final = 15.0


def _connector_id() -> str:
    return f"con_{secrets.token_hex(6)}"


@attrs.frozen
class ConnectorConfig:
    server_url: str  # http(s)://... (the server's public URL) or ws(s)://...
    token: str = attrs.field(repr=False)
    replace: bool = False
    grace: float = 30.0
    dial_timeout: float = 10.0
    hostname: str = attrs.field(factory=socket.gethostname)
    connector_id: str = attrs.field(factory=_connector_id)
    backoff_base: float = 1.0
    link: str | None = None  # --link: a raw link port (tcp:// or tls://) or a WebSocket base
    ca_file: Path | None = None  # --ca-file: a CA trusted besides the system's (core/tls.py)

    @property
    def link_url(self) -> str:
        return link_url(self.server_url, CONNECTOR_CONNECTIONS_PATH, self.link)


def _learn(selectors: SelectorHistory, message: Any) -> int:
    """Learn the ``{version, items}`` of a ``registered`` or ``config`` message."""
    if not isinstance(message, dict):
        raise LinkLost("selectors missing from the server's message")
    try:
        version = int(message["version"])
        parsed = parse_selectors(str(s) for s in message["items"])
    except (KeyError, TypeError, ValueError) as exc:
        raise LinkLost(f"bad selectors from the server: {exc}") from None
    selectors.learn(version, parsed)
    return version


class _Link:
    """The connector's registered body, one per session: control, streams, drain.

    ``role`` ("active" or "standby") is the control state a ``tunnel-dial`` is checked
    against; the metrics report the best role of the connector's links (two links to two
    replicas: one `_Link` per slot of *slots*, sharing the selectors and the metrics).
    """

    def __init__(
        self,
        config: ConnectorConfig,
        metrics: Metrics,
        selectors: SelectorHistory,
        shutdown: trio.Event,
        *,
        slots: LinkSlots | None = None,
        slot: int = 0,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.selectors = selectors
        self.shutdown = shutdown
        self.slots = slots
        self.slot = slot
        self.siblings: list[_Link] = [self]  # every slot's link, this one included
        self.role = ""
        self._active = 0  # streams in flight on this link
        self._idle = trio.Event()
        self._idle.set()

    def _set_role(self, role: str) -> None:
        self.role = role
        roles = {link.role for link in self.siblings}
        self.metrics.role = next((r for r in ("active", "standby") if r in roles), "")

    def label(self) -> str:
        slot = f" link={self.slot}" if self.slot else ""
        return f"tunnel={self.metrics.tunnel or '?'} connector={self.config.connector_id}{slot} "

    def _say(self, text: str, *args: object, level: int = logging.INFO) -> None:
        log.log(level, "%s" + text, self.label(), *args)

    def hello(self) -> dict[str, Any]:
        links = 1 if self.slots is None else self.slots.links_wanted()
        return {
            "type": "hello",
            "proto": PROTO,
            "role": "connector",
            "id": self.config.connector_id,
            "version": __version__,
            "os": sys.platform,
            "hostname": self.config.hostname,
            "replace": self.config.replace,
            # two links to two replicas (docs/protocol.md 7): one connector, not two
            **({"links": links} if links > 1 else {}),
        }

    async def __call__(
        self, session: Session, control: ControlChannel, registered: dict[str, Any]
    ) -> None:
        self.metrics.tunnel = str(registered.get("tunnel", "?"))
        version = _learn(self.selectors, registered.get("selectors"))
        self._set_role(str(registered.get("role", "standby")))
        self._say(
            "registered as %s (selectors v%d, token expires %s)",
            self.role,
            version,
            registered.get("token_expires_at"),
        )
        moved: list[trio.Event] = []  # the server drains: the next link's registration
        try:
            async with trio.open_nursery() as streams:
                streams.start_soon(self._accept_loop, session, streams)
                await race(
                    partial(self._control_loop, session, control, moved),
                    session.wait_ended,
                    self.shutdown.wait,
                    partial(self._pinger, session),
                )
                if moved and not self.shutdown.is_set():
                    await self._moved(session, moved[0])
                elif self.shutdown.is_set():
                    await self._drain(session, control)
                streams.cancel_scope.cancel()
        finally:
            if not moved:  # the role is the next link's once this one moved
                self._set_role("")
        if not self.shutdown.is_set() and not moved:
            self._raise_end(session)

    async def _moved(self, session: Session, arrived: trio.Event) -> None:
        """Make before break: the next link registers (at most `MOVE_OVERLAP`), the streams
        here end (within ``grace``), then this link closes. The server routes nothing new here
        meanwhile."""
        with trio.move_on_after(MOVE_OVERLAP):
            await race(arrived.wait, self.shutdown.wait, session.wait_ended)
        with trio.move_on_after(self.config.grace):  # a stop meanwhile gives them grace too
            await wait_streams_done(session)

    def _raise_end(self, session: Session) -> None:
        """How the session ended, as the exception `run_link` acts on."""
        remote = session.remote_go_away
        if remote is not None:
            self.metrics.go_away_received[GoAwayCode.describe(remote)] += 1
        permanent = permanent_for_go_away(remote)
        if permanent is not None:
            raise permanent
        if remote == GoAwayCode.RELAY_RESTARTING:
            raise LinkLost("the relay is restarting", retry_now=True)
        raise LinkLost(f"the session ended ({session.error or 'closed by the server'})")

    async def _drain(self, session: Session, control: ControlChannel) -> None:
        self._say(
            "draining: %d stream(s) get %.0f s", self.metrics.active_streams, self.config.grace
        )
        with (
            trio.move_on_after(_SAY_GRACE),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await control.send({"type": "shutdown", "reason": "connector clean stop"})
        session.go_away_nowait(GoAwayCode.CONNECTOR_CLEAN_STOP)
        with trio.move_on_after(self.config.grace):
            await self._idle.wait()

    async def _pinger(self, session: Session) -> None:
        while True:
            await trio.sleep(_PING_INTERVAL)
            try:
                self.metrics.rtt = await session.ping()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await session.wait_ended()  # the race's session.wait_ended reports it
                return

    async def _control_loop(
        self, session: Session, control: ControlChannel, moved: list[trio.Event]
    ) -> None:
        """Until the control stream ends (then the session's end says why), or the server
        drains (``drain``: the next link is dialled, `hand_over`)."""
        while True:
            try:
                message = await control.receive()
            except (trio.EndOfChannel, trio.BrokenResourceError):
                with trio.move_on_after(_SAY_GRACE):
                    await session.wait_ended()  # so that _raise_end sees its GO_AWAY
                return
            kind = message.get("type")
            if kind == "config":
                version = _learn(self.selectors, message.get("selectors"))
                self._say("selectors updated to v%d", version)
            elif kind == "promote":
                self._set_role("active")
                self._say("promoted to active")
            elif kind == "token_expiry_warning":
                self._say(
                    "the tunnel token expires at %s: rotate it and restart with the new one",
                    message.get("expires_at"),
                    level=logging.WARNING,
                )
            elif kind == "error":
                remote = session.remote_go_away
                if remote is not None:
                    self.metrics.go_away_received[GoAwayCode.describe(remote)] += 1
                raise_for_error(message)
            elif kind == "shutdown":
                self._say("the server is shutting down (%s)", message.get("reason"))
            elif kind == "replicas":
                if self.slots is not None:
                    self.slots.learn(message)
            elif kind == "drain":
                if self.slots is not None:
                    self.slots.moving(self.slot)
                arrived = hand_over()
                if arrived is not None:
                    self._say("the server drains: linking again, then this link closes")
                    moved.append(arrived)
                    return
            else:
                self._say("unknown control message %r", kind, level=logging.WARNING)

    async def _accept_loop(self, session: Session, nursery: trio.Nursery) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async for stream in session:
                nursery.start_soon(self._serve_stream, stream)

    async def _serve_stream(self, stream: trio.abc.Stream) -> None:
        self.metrics.active_streams += 1
        self._active += 1
        self._idle = trio.Event() if self._active == 1 else self._idle
        try:
            await self._dial(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        except Exception as exc:  # a malformed open from the edge: this stream only
            self._say("stream failed: %s", exc, level=logging.WARNING)
        finally:
            await trio.aclose_forcefully(stream)
            self.metrics.active_streams -= 1
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def _refuse(self, stream: trio.abc.Stream, code: str, message: str) -> None:
        self.metrics.dial_failures[code] += 1
        self._say("dial refused (%s): %s", code, message)
        await reject_open(stream, code, message)

    async def _dial(self, stream: trio.abc.Stream) -> None:
        with trio.fail_after(_OPEN_TIMEOUT):
            request = await read_open(stream)
        kind = request["kind"]
        if kind == "probe":
            await accept_open(stream)
            return
        if kind != "tunnel-dial":
            await self._refuse(stream, "bad-request", f"unknown stream kind {kind!r}")
            return
        if self.role != "active":
            await self._refuse(stream, "unavailable", "this connector is a standby")
            return
        dest = request.get("dest")
        try:
            host, port = parse_dest(str(dest))
        except SelectorError as exc:
            await self._refuse(stream, "bad-request", str(exc))
            return
        if not self.selectors.admits(request.get("selector_version"), host, port):
            await self._refuse(stream, "forbidden", f"{dest} is outside the tunnel's selectors")
            return
        target = await self._connect(stream, host, port)
        if target is None:
            return
        self.metrics.opened_streams += 1
        await accept_open(stream)
        result = await splice(stream, target)
        self.metrics.bytes_in += result.a_to_b
        self.metrics.bytes_out += result.b_to_a

    async def _connect(
        self, stream: trio.abc.Stream, host: str, port: int
    ) -> trio.abc.Stream | None:
        try:
            with trio.fail_after(self.config.dial_timeout):
                return await trio.open_tcp_stream(host, port)
        except trio.TooSlowError:
            await self._refuse(stream, "timeout", f"{host}:{port} did not answer in time")
        except socket.gaierror as exc:
            await self._refuse(stream, "nxdomain", f"{host}: {exc.strerror or exc}")
        except OSError as exc:
            refused = exc.errno == errno.ECONNREFUSED or "refused" in str(exc).lower()
            code = "refused" if refused else "unavailable"
            await self._refuse(stream, code, f"{host}:{port}: {exc.strerror or exc}")
        return None


def _as_permanent(refused: LinkRefused) -> PermanentError:
    """A permanent refusal as the connector's exit: its code, else "token-invalid" for a
    refused upgrade (401/403) whose reason this connector does not know."""
    if isinstance(refused, PermanentError):
        return refused
    code = refused.code.replace("_", "-")
    if code not in EXIT_CODES and refused.status is not None:
        return permanent_for_code("token-invalid", "the server refused the tunnel token")
    return permanent_for_code(code, refused.message)


async def serve_connector(
    config: ConnectorConfig,
    *,
    shutdown: trio.Event,
    metrics: Metrics | None = None,
) -> None:
    """Hold the tunnel until *shutdown* is set (then drain and return) or a permanent end
    (raises `PermanentError`)."""
    metrics = Metrics() if metrics is None else metrics
    # two links to two replicas when the server names several (core/replica_links.py)
    slots = LinkSlots(config.link_url, CONNECTOR_CONNECTIONS_PATH)
    selectors = SelectorHistory()
    links = [
        _Link(config, metrics, selectors, shutdown, slots=slots, slot=i) for i in range(slots.slots)
    ]
    for link in links:
        link.siblings = links
    tls = client_context(config.ca_file)

    def lost(_exc: BaseException) -> None:
        metrics.reconnects += 1

    try:
        async with trio.open_nursery() as nursery:
            for link in links:
                nursery.start_soon(
                    partial(
                        run_link,
                        slots.target(link.slot, shutdown),
                        config.token,
                        link.hello,
                        slots.serve(link.slot, link),
                        backoff=Backoff(base=config.backoff_base, first=FIRST_RETRY_S),
                        shutdown=shutdown,
                        label=link.label,
                        on_lost=lost,
                        ssl_context=tls,
                    )
                )
    except BaseExceptionGroup as group:
        refused = find_in_group(group, LinkRefused)
        if refused is None:
            raise
        raise _as_permanent(refused) from None
