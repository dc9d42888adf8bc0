"""A tunnel-attached instance's way out: an HTTP CONNECT and SOCKS5 proxy on one loopback port.

Each instance on a tunnel gets its own `EgressProxy` (docs/tunnels.md "Egress"), with its own
random credentials (`Credentials`): only that instance's device configuration holds them, so
another device on the host that finds the port (it is on the host's loopback) is answered 407
(HTTP) or has its SOCKS authentication refused, and gets no connection. The device's network is
pointed at it (the virtual Android: the global ``http_proxy`` setting, with the credentials in
the device's `DeviceNetwork`; an emulator, which the supervisor opens after starting the proxy:
``http_proxy=http://user:password@127.0.0.1:PORT`` in the emulator process's environment, the
emulator dialing from the host; `DeviceSpec.http_proxy`).

A destination that matches the tunnel's selectors goes through the tunnel (an ``egress``
stream to the edge, relayed to the connector, docs/protocol.md 6), and is dialled on the
connector's side. Anything else is dialled from the host only if the host's `NetPolicy`
allows the resolved address (public addresses by default: never the host's loopback, its
services, other instances' proxies or the operator's private ranges; netdial.py). The
selectors are the ones the instance attached with.

The protocol is parsed by the sans-I/O `Handshake` (proxy_protocol.py); this module only
moves bytes. One bad client ends its own connection: every failure of one connection is
contained in its handler.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from ..core import OpenError, splice
from ..core.selectors import Selector, matches
from . import metrics
from .netdial import DialReason, DialRefused, ProxyEndpoint, open_checked
from .netpolicy import NetPolicy
from .proxy_protocol import Credentials, Dial, DialFailure, Handshake, Reject, Reply

log = logging.getLogger(__name__)

__all__ = ["EgressDialError", "EgressProxy", "TunnelDialer", "new_credentials"]

TunnelDialer = Callable[[str, int], Awaitable[trio.abc.Stream]]

_HEAD_TIMEOUT_S: Final = 30.0
_DIRECT_TIMEOUT_S: Final = 15.0
_RECEIVE: Final = 16 * 1024
_LOOPBACK: Final = "127.0.0.1"
_LINGER_S: Final = 1.0
_LINGER_BYTES: Final = 64 * 1024

_FROM_DIAL_REASON: Final = {
    DialReason.NOT_ALLOWED: DialFailure.NOT_ALLOWED,
    DialReason.NO_SUCH_HOST: DialFailure.UNREACHABLE,
    DialReason.REFUSED: DialFailure.REFUSED,
    DialReason.TIMEOUT: DialFailure.TIMEOUT,
    DialReason.UNREACHABLE: DialFailure.UNREACHABLE,
}
_FROM_OPEN_CODE: Final = {
    "forbidden": DialFailure.NOT_ALLOWED,
    "refused": DialFailure.REFUSED,
    "nxdomain": DialFailure.UNREACHABLE,
    "timeout": DialFailure.TIMEOUT,
}


class EgressDialError(Exception):
    """`EgressProxy.dial` did not connect; ``failure`` is what the client is told."""

    def __init__(self, failure: DialFailure, detail: str) -> None:
        super().__init__(f"{failure.value}: {detail}")
        self.failure = failure


def new_credentials() -> Credentials:
    """Random per-instance proxy credentials (URL-safe, so they fit in a proxy URL)."""
    return Credentials(f"dy-{secrets.token_hex(6)}", secrets.token_urlsafe(24))


class EgressProxy:
    """One instance's proxy. `serve` listens; `dial` is the routing decision, also usable
    directly by a driver that has no network stack of its own."""

    def __init__(
        self,
        instance_id: str,
        selectors: Sequence[Selector],
        tunnel: TunnelDialer | None,
        *,
        policy: NetPolicy | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.selectors = tuple(selectors)
        self.policy = NetPolicy() if policy is None else policy
        self.credentials = new_credentials() if credentials is None else credentials
        self._tunnel = tunnel
        self.port = 0

    def __repr__(self) -> str:
        return f"EgressProxy({self.instance_id}, port={self.port})"

    @property
    def endpoint(self) -> ProxyEndpoint:
        """Where the instance's device finds this proxy, with its credentials."""
        return ProxyEndpoint(_LOOPBACK, self.port, self.credentials)

    def through_tunnel(self, host: str, port: int) -> bool:
        return self._tunnel is not None and matches(self.selectors, host, port)

    async def dial(self, host: str, port: int) -> trio.abc.Stream:
        """A connection to host:port: through the tunnel when the selectors say so, else
        directly if the host's policy allows it. `EgressDialError` otherwise."""
        if self._tunnel is not None and self.through_tunnel(host, port):
            try:
                return await self._tunnel(host, port)
            except OpenError as exc:
                failure = _FROM_OPEN_CODE.get(exc.code, DialFailure.UNAVAILABLE)
                raise EgressDialError(failure, f"tunnel: {exc.code}") from exc
            except OSError as exc:
                raise EgressDialError(DialFailure.UNAVAILABLE, f"tunnel: {exc}") from exc
        try:
            return await open_checked(host, port, self.policy, limit_s=_DIRECT_TIMEOUT_S)
        except DialRefused as exc:
            detail = exc.refusal.value if exc.refusal is not None else exc.reason.value
            raise EgressDialError(_FROM_DIAL_REASON[exc.reason], detail) from exc

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host=_LOOPBACK, backlog=64)
        self.port = int(listeners[0].socket.getsockname()[1])
        log.info("instance %s: egress proxy on %s:%d", self.instance_id, _LOOPBACK, self.port)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            upstream = await self._handshake(client)
            if upstream is not None:
                metrics.count_egress_splice(await splice(client, upstream))
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("egress client of %s: %r", self.instance_id, exc)
        except Exception:  # one bad client ends its own connection, never the proxy
            log.exception("egress client of %s: unexpected failure", self.instance_id)
        finally:
            await trio.aclose_forcefully(client)

    async def _handshake(self, client: trio.SocketStream) -> trio.abc.Stream | None:
        handshake = Handshake(self.credentials)
        with trio.fail_after(_HEAD_TIMEOUT_S):
            while True:
                for event in handshake.receive_data(await client.receive_some(_RECEIVE)):
                    if isinstance(event, Reply):
                        await client.send_all(event.data)
                    elif isinstance(event, Reject):
                        log.debug("egress client of %s: %s", self.instance_id, event.reason)
                        if event.data:
                            await client.send_all(event.data)
                            await _linger(client)
                        return None
                    else:
                        return await self._connect(client, handshake, event)

    async def _connect(
        self, client: trio.SocketStream, handshake: Handshake, request: Dial
    ) -> trio.abc.Stream | None:
        try:
            upstream = await self.dial(request.host, request.port)
        except EgressDialError as exc:  # a scan refused by policy is DEBUG: no log flood
            level = logging.DEBUG if exc.failure is DialFailure.NOT_ALLOWED else logging.INFO
            where = f"{request.host}:{request.port}"
            log.log(level, "instance %s: %s refused: %s", self.instance_id, where, exc)
            await client.send_all(handshake.failed(exc.failure))
            return None
        try:
            await client.send_all(handshake.succeeded())
            if request.forward or handshake.trailing:
                await upstream.send_all(request.forward + handshake.trailing)
        except BaseException:
            await trio.aclose_forcefully(upstream)
            raise
        return upstream


async def _linger(client: trio.SocketStream) -> None:
    """After a refusal: end our side, then read (and drop) a little of what the client still
    sends, so closing does not reset the connection before the client read the answer."""
    await client.send_eof()
    drained = 0
    with trio.move_on_after(_LINGER_S):
        while drained < _LINGER_BYTES and (data := await client.receive_some(_RECEIVE)):
            drained += len(data)
