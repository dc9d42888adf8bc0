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

Ends: a permanent end (401 on the upgrade, ``error {permanent}``, or a "do not retry" GO_AWAY)
raises `PermanentError`, whose ``exit_code`` the process returns; anything else reconnects
with full-jitter backoff (`Backoff`), with one immediate retry after GO_AWAY(relay
restarting). `shutdown` set means drain: ``shutdown`` on the control stream and
GO_AWAY(connector clean stop) first (the edge stops routing here and promotes a standby),
then streams in flight get ``grace`` seconds; cancelling the caller's scope stops at once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import secrets
import socket
import sys
from collections import OrderedDict
from typing import Any, Final

import attrs
import trio
import trio_websocket

from .. import __version__
from ..core import (
    Backoff,
    ControlChannel,
    GoAwayCode,
    Session,
    UpgradeRejected,
    accept_open,
    open_session,
    open_transport,
    read_open,
    reject_open,
    splice,
)
from ..core.selectors import Selector, SelectorError, matches, parse_dest, parse_selectors
from ..core.transports import link_url
from ._errors import (
    LinkLostError,
    find_in_group,
    find_permanent,
    permanent_for_code,
    permanent_for_go_away,
)
from .metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["CONNECTOR_CONNECTIONS_PATH", "ConnectorConfig", "serve_connector"]

CONNECTOR_CONNECTIONS_PATH: Final = "/v1/connector_connections"
PROTO: Final = 1
_HELLO_TIMEOUT: Final = 10.0
_OPEN_TIMEOUT: Final = 10.0
_KEPT_VERSIONS: Final = 16
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

    @property
    def link_url(self) -> str:
        return link_url(self.server_url, CONNECTOR_CONNECTIONS_PATH, self.link)


@attrs.define
class _Selectors:
    """Selector versions seen since start, newest last (bounded)."""

    versions: OrderedDict[int, tuple[Selector, ...]] = attrs.field(factory=OrderedDict)

    def update(self, message: Any) -> int:
        if not isinstance(message, dict):
            raise LinkLostError("selectors missing from the server's message")
        try:
            version = int(message["version"])
            parsed = parse_selectors(str(s) for s in message["items"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LinkLostError(f"bad selectors from the server: {exc}") from None
        self.versions[version] = parsed
        self.versions.move_to_end(version)
        while len(self.versions) > _KEPT_VERSIONS:
            self.versions.popitem(last=False)
        return version

    def admits(self, version: object, host: str, port: int) -> bool:
        chosen = self.versions.get(version) if isinstance(version, int) else None
        if chosen is None and self.versions:
            chosen = next(reversed(self.versions.values()))
        return chosen is not None and matches(chosen, host, port)


class _Link:
    """One session's worth of connector: control, streams, drain."""

    def __init__(
        self,
        config: ConnectorConfig,
        metrics: Metrics,
        selectors: _Selectors,
        session: Session,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.selectors = selectors
        self.session = session
        self.tunnel = "?"
        self._idle = trio.Event()
        self._idle.set()

    def _say(self, text: str, *args: object, level: int = logging.INFO) -> None:
        log.log(
            level, "tunnel=%s connector=%s " + text, self.tunnel, self.config.connector_id, *args
        )

    async def run(self, backoff: Backoff, shutdown: trio.Event) -> None:
        control = ControlChannel(await self.session.open_stream())
        with trio.fail_after(_HELLO_TIMEOUT):
            await control.send(
                {
                    "type": "hello",
                    "proto": PROTO,
                    "role": "connector",
                    "id": self.config.connector_id,
                    "version": __version__,
                    "os": sys.platform,
                    "hostname": self.config.hostname,
                    "replace": self.config.replace,
                }
            )
            reply = await control.receive()
        _raise_for_error(reply)
        if reply.get("type") != "registered":
            raise LinkLostError(f"expected registered, got {reply.get('type')!r}")
        self.tunnel = str(reply.get("tunnel", "?"))
        self.metrics.tunnel = self.tunnel
        version = self.selectors.update(reply.get("selectors"))
        self.metrics.role = str(reply.get("role", "standby"))
        self._say(
            "registered as %s (selectors v%d, token expires %s)",
            self.metrics.role,
            version,
            reply.get("token_expires_at"),
        )
        backoff.succeeded(trio.current_time())
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._control_loop, control)
                nursery.start_soon(self._accept_loop, nursery)
                nursery.start_soon(self._pinger)
                nursery.start_soon(self._watch_end, shutdown)
                await shutdown.wait()
                await self._drain(control)
                nursery.cancel_scope.cancel()
        finally:
            self.metrics.role = ""

    async def _drain(self, control: ControlChannel) -> None:
        self._say(
            "draining: %d stream(s) get %.0f s", self.metrics.active_streams, self.config.grace
        )
        with trio.move_on_after(2.0):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await control.send({"type": "shutdown", "reason": "connector clean stop"})
        self.session.go_away_nowait(GoAwayCode.CONNECTOR_CLEAN_STOP)
        with trio.move_on_after(self.config.grace):
            await self._idle.wait()

    async def _watch_end(self, shutdown: trio.Event) -> None:
        await self.session.wait_ended()
        if shutdown.is_set():
            await trio.sleep_forever()  # the drain decides when to stop
        remote = self.session.remote_go_away
        if remote is not None:
            self.metrics.go_away_received[GoAwayCode.describe(remote)] += 1
        permanent = permanent_for_go_away(remote)
        if permanent is not None:
            raise permanent
        if remote == GoAwayCode.RELAY_RESTARTING:
            raise _RelayRestarting
        raise LinkLostError(f"the session ended ({self.session.error or 'closed by the server'})")

    async def _pinger(self) -> None:
        while True:
            await trio.sleep(_PING_INTERVAL)
            try:
                self.metrics.rtt = await self.session.ping()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def _control_loop(self, control: ControlChannel) -> None:
        while True:
            try:
                message = await control.receive()
            except (trio.EndOfChannel, trio.BrokenResourceError):
                await trio.sleep_forever()  # _watch_end reports how the session ended
            kind = message.get("type")
            if kind == "config":
                version = self.selectors.update(message.get("selectors"))
                self._say("selectors updated to v%d", version)
            elif kind == "promote":
                self.metrics.role = "active"
                self._say("promoted to active")
            elif kind == "token_expiry_warning":
                self._say(
                    "the tunnel token expires at %s: rotate it and restart with the new one",
                    message.get("expires_at"),
                    level=logging.WARNING,
                )
            elif kind == "error":
                self._record_go_away_soon()
                _raise_for_error(message)
            elif kind == "shutdown":
                self._say("the server is shutting down (%s)", message.get("reason"))
            else:
                self._say("unknown control message %r", kind, level=logging.WARNING)

    def _record_go_away_soon(self) -> None:
        remote = self.session.remote_go_away
        if remote is not None:
            self.metrics.go_away_received[GoAwayCode.describe(remote)] += 1

    async def _accept_loop(self, nursery: trio.Nursery) -> None:
        try:
            async for stream in self.session:
                nursery.start_soon(self._serve_stream, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await trio.sleep_forever()  # _watch_end reports how the session ended

    async def _serve_stream(self, stream: trio.abc.Stream) -> None:
        self.metrics.active_streams += 1
        self._idle = trio.Event() if self.metrics.active_streams == 1 else self._idle
        try:
            await self._dial(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        except Exception as exc:  # a malformed open from the edge: this stream only
            self._say("stream failed: %s", exc, level=logging.WARNING)
        finally:
            await trio.aclose_forcefully(stream)
            self.metrics.active_streams -= 1
            if self.metrics.active_streams == 0:
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
        if self.metrics.role != "active":
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


class _RelayRestarting(LinkLostError):
    pass


def _raise_for_error(message: dict[str, Any]) -> None:
    if message.get("type") != "error":
        return
    code = str(message.get("code", "error"))
    text = str(message.get("message", ""))
    if message.get("permanent"):
        raise permanent_for_code(code, text)
    raise LinkLostError(f"{code}: {text}")


def _rejected(exc: trio_websocket.ConnectionRejected | UpgradeRejected) -> Exception:
    if exc.status_code == 401:
        code = "token-invalid"
        try:
            body = json.loads(exc.body or b"{}")
            code = str(body.get("code", code)) if isinstance(body, dict) else code
        except ValueError:
            pass
        return permanent_for_code(code, "the server refused the tunnel token")
    return LinkLostError(f"upgrade rejected with HTTP {exc.status_code}")


async def _run_link(
    config: ConnectorConfig,
    metrics: Metrics,
    selectors: _Selectors,
    backoff: Backoff,
    shutdown: trio.Event,
) -> None:
    headers = [(b"authorization", f"Bearer {config.token}".encode())]
    log.debug("connector=%s dialling %s", config.connector_id, config.link_url)
    try:
        async with (
            open_transport(config.link_url, extra_headers=headers) as transport,
            open_session(transport, client=True) as session,
        ):
            await _Link(config, metrics, selectors, session).run(backoff, shutdown)
    except (trio_websocket.ConnectionRejected, UpgradeRejected) as exc:
        raise _rejected(exc) from None


async def serve_connector(
    config: ConnectorConfig,
    *,
    shutdown: trio.Event,
    metrics: Metrics | None = None,
) -> None:
    """Hold the tunnel until *shutdown* is set (then drain and return) or a permanent end
    (raises `PermanentError`)."""
    metrics = Metrics() if metrics is None else metrics
    selectors = _Selectors()
    backoff = Backoff(base=config.backoff_base)
    first = True
    while not shutdown.is_set():
        if not first:
            metrics.reconnects += 1
        first = False
        fast = False
        try:
            await _run_link(config, metrics, selectors, backoff, shutdown)
        except Exception as exc:
            permanent = find_permanent(exc)
            if permanent is not None:
                log.error(
                    "tunnel=%s connector=%s stopping for good: %s",
                    metrics.tunnel or "?",
                    config.connector_id,
                    permanent,
                )
                raise permanent from None
            fast = find_in_group(exc, _RelayRestarting) is not None
            log.warning(
                "tunnel=%s connector=%s link to %s lost: %s",
                metrics.tunnel or "?",
                config.connector_id,
                config.link_url,
                _describe(exc),
            )
        backoff.failed(trio.current_time())
        if shutdown.is_set():
            return
        delay = 0.0 if fast else backoff.next_delay()
        log.info(
            "tunnel=%s connector=%s reconnecting in %.1f s",
            metrics.tunnel or "?",
            config.connector_id,
            delay,
        )
        with trio.move_on_after(delay):
            await shutdown.wait()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    if str(exc):
        return str(exc)
    reason = exc.__cause__ or exc.__context__
    return type(exc).__name__ if reason is None else f"{type(exc).__name__}: {_describe(reason)}"
