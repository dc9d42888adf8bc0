"""``devyard hostd``: the host daemon's link to the edge, and its process main.

The daemon dials the edge outbound (``ws(s)://SERVER/v1/host_connections``, so it works behind
NAT), authenticates with its host token in the upgrade request, runs a mux session and its
control stream (docs/protocol.md section 7): ``hello`` -> ``registered``, then orders in and
instance events out. Instances live in the `Supervisor`, not in the link: when the link drops
the daemon reconnects with `Backoff` and the instances keep running; their events wait in the
supervisor's outbox. A refused token (401/403 at the upgrade) or a permanent ``error`` ends the
daemon with `EXIT_PERMANENT` instead of retrying.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import trio
import trio_websocket

from .. import __version__
from ..core import (
    Backoff,
    ControlChannel,
    Session,
    UpgradeRejected,
    open_session,
    open_transport,
)
from ..core.transports import link_url
from .drivers.emulator import EmulatorConfig
from .endpoints import serve_streams
from .netpolicy import NetPolicy
from .sandboxes import prepare_data_dir
from .supervisor import Supervisor

log = logging.getLogger(__name__)

__all__ = [
    "EXIT_PERMANENT",
    "HOST_CONNECTIONS_PATH",
    "HostdConfig",
    "PermanentLinkError",
    "run_hostd",
    "serve_hostd",
]

HOST_CONNECTIONS_PATH: Final = "/v1/host_connections"
EXIT_PERMANENT: Final = 3
PROTO: Final = 1
_STOP_GRACE: Final = 10.0
_PLATFORMS_BY_DRIVER: Final = {
    "virtual": ("android", "ios", "xcode", "gradle"),
    "android-emulator": ("android",),
}


class PermanentLinkError(Exception):
    """The edge refused this host for good (bad token, permanent ``error``): do not retry."""


class _LinkLostError(Exception):
    pass


@attrs.frozen
class HostdConfig:
    server_url: str  # http(s)://... (the server's public URL) or ws(s)://...
    token: str = attrs.field(repr=False)
    region: str
    data_dir: Path
    capacity: int = 4
    drivers: tuple[str, ...] = ("virtual",)
    hostname: str = attrs.field(factory=socket.gethostname)
    backoff_base: float = 1.0
    link: str | None = None  # --link: a raw link port (tcp:// or tls://) or a WebSocket base
    emulator: EmulatorConfig | None = None  # the android-emulator driver's (the CLI loads it)
    net_policy: NetPolicy = attrs.field(factory=NetPolicy)  # --allow-network: netpolicy.py

    @property
    def link_url(self) -> str:
        return link_url(self.server_url, HOST_CONNECTIONS_PATH, self.link)

    @property
    def platforms(self) -> list[str]:
        return sorted({p for d in self.drivers for p in _PLATFORMS_BY_DRIVER.get(d, ())})


def _find_permanent(exc: BaseException) -> PermanentLinkError | None:
    if isinstance(exc, PermanentLinkError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_permanent(inner)
            if found is not None:
                return found
    return None


async def serve_hostd(
    config: HostdConfig,
    *,
    shutdown: trio.Event | None = None,
    task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the host until *shutdown* is set (then stop cleanly) or a permanent error."""
    shutdown = trio.Event() if shutdown is None else shutdown
    try:
        await _serve_hostd(config, shutdown, task_status)
    except BaseExceptionGroup as group:
        permanent = _find_permanent(group)
        if permanent is None:
            raise
        raise permanent from None


async def _serve_hostd(
    config: HostdConfig, shutdown: trio.Event, task_status: trio.TaskStatus[Supervisor]
) -> None:
    await trio.to_thread.run_sync(prepare_data_dir, config.data_dir)  # 0700, no stale sandboxes
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(
            nursery,
            config.data_dir,
            capacity=config.capacity,
            driver=config.drivers[0],
            emulator=config.emulator,
            net_policy=config.net_policy,
            server_url=config.server_url,
        )
        task_status.started(supervisor)
        try:
            await _link_loop(config, supervisor, shutdown)
        finally:
            supervisor.stop_all()
            with trio.move_on_after(_STOP_GRACE, shield=True):
                await supervisor.wait_idle()
            nursery.cancel_scope.cancel()


async def _link_loop(config: HostdConfig, supervisor: Supervisor, shutdown: trio.Event) -> None:
    backoff = Backoff(base=config.backoff_base)
    while not shutdown.is_set():
        try:
            await _run_link(config, supervisor, backoff, shutdown)
        except Exception as exc:
            permanent = _find_permanent(exc)
            if permanent is not None:
                raise permanent from None
            log.warning("link to %s lost: %s", config.link_url, exc or type(exc).__name__)
        backoff.failed(trio.current_time())
        if shutdown.is_set():
            return
        delay = backoff.next_delay()
        log.info("reconnecting in %.1f s", delay)
        with trio.move_on_after(delay):
            await shutdown.wait()


async def _run_link(
    config: HostdConfig, supervisor: Supervisor, backoff: Backoff, shutdown: trio.Event
) -> None:
    headers = [(b"authorization", f"Bearer {config.token}".encode())]
    try:
        async with (
            open_transport(config.link_url, extra_headers=headers) as transport,
            open_session(transport, client=True) as session,
        ):
            await _run_session(config, supervisor, backoff, shutdown, session)
    except (trio_websocket.ConnectionRejected, UpgradeRejected) as exc:
        if exc.status_code in (401, 403):
            raise PermanentLinkError(
                f"the server refused the host token (HTTP {exc.status_code}); "
                "create one with: devyard admin host-token --data-dir DIR"
            ) from exc
        raise _LinkLostError(f"upgrade rejected with HTTP {exc.status_code}") from exc


async def _run_session(
    config: HostdConfig,
    supervisor: Supervisor,
    backoff: Backoff,
    shutdown: trio.Event,
    session: Session,
) -> None:
    control = ControlChannel(await session.open_stream())
    await control.send(
        {
            "type": "hello",
            "proto": PROTO,
            "role": "host",
            "id": config.hostname,
            "version": __version__,
            "os": sys.platform,
            "hostname": config.hostname,
            "region": config.region,
            "capacity": config.capacity,
            "platforms": config.platforms,
            "drivers": list(config.drivers),
            "instances": supervisor.running(),
        }
    )
    reply = await control.receive()
    _raise_for_error(reply)
    if reply.get("type") != "registered":
        raise _LinkLostError(f"expected registered, got {reply.get('type')!r}")
    log.info("registered with %s as %s", config.link_url, reply.get("host_id"))
    backoff.succeeded(trio.current_time())
    supervisor.link = session
    try:
        await _serve_registered(supervisor, shutdown, session, control)
    finally:
        supervisor.link = None


async def _serve_registered(
    supervisor: Supervisor, shutdown: trio.Event, session: Session, control: ControlChannel
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_orders, control, supervisor)
        nursery.start_soon(_send_events, control, supervisor)
        nursery.start_soon(serve_streams, session, supervisor.endpoint)
        await shutdown.wait()
        # Clean stop: say so, GO_AWAY first, then stop instances and report them.
        await control.send({"type": "shutdown", "reason": "host daemon stopping"})
        session.go_away_nowait()
        supervisor.stop_all()
        with trio.move_on_after(_STOP_GRACE):
            await supervisor.wait_idle()
        nursery.cancel_scope.cancel()


def _raise_for_error(message: dict[str, Any]) -> None:
    if message.get("type") != "error":
        return
    text = f"{message.get('code')}: {message.get('message')}"
    if message.get("permanent"):
        raise PermanentLinkError(f"the server refused this host ({text})")
    raise _LinkLostError(text)


async def _receive_orders(control: ControlChannel, supervisor: Supervisor) -> None:
    while True:
        try:
            message = await control.receive()
        except trio.EndOfChannel:
            raise _LinkLostError("the edge closed the control stream") from None
        kind = message.get("type")
        if kind == "instance_start" and isinstance(message.get("order"), dict):
            supervisor.start(message["order"])
        elif kind == "instance_stop":
            supervisor.stop(str(message.get("instance_id")))
        elif kind == "error":
            _raise_for_error(message)
        elif kind == "shutdown":
            log.info("the edge is shutting down (%s)", message.get("reason"))
        else:
            log.warning("unknown control message %r", kind)


async def _send_events(control: ControlChannel, supervisor: Supervisor) -> None:
    while True:
        await supervisor.wait_outbox()
        message = supervisor.outbox_peek()
        if message is not None:
            await control.send(message)
            supervisor.outbox_pop()


async def _watch_signals(receiver: AsyncIterator[int], shutdown: trio.Event) -> None:
    async for signum in receiver:
        name = signal.Signals(signum).name
        if shutdown.is_set():
            raise KeyboardInterrupt(name)
        log.info("%s: stopping (instances are stopped, the edge is told)", name)
        shutdown.set()


async def run_hostd(config: HostdConfig, *, err: TextIO) -> int:
    """``devyard hostd``'s trio main: signals, the daemon, a clear message on a permanent error."""
    shutdown = trio.Event()
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as receiver:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, receiver, shutdown)
                try:
                    await serve_hostd(config, shutdown=shutdown)
                finally:
                    nursery.cancel_scope.cancel()
    except Exception as exc:
        permanent = _find_permanent(exc)
        if permanent is None:
            raise
        print(f"devyard hostd: error: {permanent}", file=err, flush=True)
        return EXIT_PERMANENT
    return 0
