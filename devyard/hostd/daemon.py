"""``devyard hostd``: the host daemon's link to the edge, and its process main.

The daemon dials the edge outbound (``ws(s)://SERVER/v1/host_connections``, so it works behind
NAT), authenticates with its host token in the upgrade request, runs a mux session and its
control stream (docs/protocol.md section 7): ``hello`` -> ``registered``, then orders in and
instance events out. The lifecycle (dial, hello, reconnect with backoff, exit for good) is
`devyard.core.link.run_link`; this module holds hostd's part of it: the ``hello`` (with the
ids of the instances running here, so the server ends the ones it thinks run here and do not)
and the registered body. Instances live in the `Supervisor`, not in the link: when the link
drops the daemon reconnects and the instances keep running; their events wait in the
supervisor's outbox, and their egress streams fail with `LinkDown` meanwhile. A refused token
(401/403 at the upgrade) or a permanent ``error`` ends the daemon with `EXIT_PERMANENT`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import trio

from .. import __version__
from .._process import EXIT_INTERRUPTED, Stopped, run_until_signalled
from ..core import FIRST_RETRY_S, Backoff, ControlChannel, MuxError, Session, request_open
from ..core.link import (
    HOST_PATH,
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
from ..core.tls import client_context
from ..core.transports import link_url
from ..core.versions import VERSION_UNSUPPORTED
from .browser import BrowserConfig
from .drivers import DriverOpener, Platform, drivers_by_name
from .drivers.emulator import EmulatorConfig
from .drivers.xcode import XcodeConfig
from .endpoints import serve_streams
from .metrics import serve_metrics
from .netpolicy import NetPolicy
from .sandboxes import prepare_data_dir
from .supervisor import LinkDown, Supervisor

log = logging.getLogger(__name__)

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_PERMANENT",
    "EXIT_VERSION",
    "HOST_CONNECTIONS_PATH",
    "HostdConfig",
    "PermanentLinkError",
    "run_hostd",
    "serve_hostd",
]

HOST_CONNECTIONS_PATH: Final = HOST_PATH
EXIT_PERMANENT: Final = 3
EXIT_VERSION: Final = 4  # this host daemon is older than the server takes (core/versions.py)
_STOP_GRACE: Final = 10.0
_SAY_GRACE: Final = 2.0
#: How long a link the server asked to move keeps its streams (the server bounds it too).
_MOVE_GRACE: Final = 60.0
_PLATFORMS_BY_DRIVER: Final = {
    "virtual": ("android", "ios", "xcode", "gradle"),
    "android-emulator": ("android",),
    "gradle": ("gradle",),
    "xcode": ("xcode",),
}


class PermanentLinkError(Exception):
    """The edge refused this host for good (bad token, permanent ``error``): do not retry.
    ``exit_code`` is the process's: `EXIT_VERSION` for a host older than the server takes."""

    def __init__(self, message: str, *, exit_code: int = EXIT_PERMANENT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _explain(refused: LinkRefused) -> PermanentLinkError:
    if refused.status is not None:
        return PermanentLinkError(
            f"the server refused the host token (HTTP {refused.status}); "
            "create one with: devyard admin host-token --data-dir DIR"
        )
    exit_code = EXIT_VERSION if refused.code == VERSION_UNSUPPORTED else EXIT_PERMANENT
    return PermanentLinkError(f"the server refused this host ({refused})", exit_code=exit_code)


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
    xcode: XcodeConfig | None = None  # the xcode driver's and iOS Xcode sandboxes' (the CLI's)
    net_policy: NetPolicy = attrs.field(factory=NetPolicy)  # --allow-network: netpolicy.py
    ca_file: Path | None = None  # --ca-file: a CA trusted besides the system's (core/tls.py)
    browser: BrowserConfig = attrs.field(factory=BrowserConfig)  # --chromium: docs/sandbox.md
    metrics_listen: tuple[str, int] | None = None  # --metrics-listen: the operator port

    @property
    def link_url(self) -> str:
        return link_url(self.server_url, HOST_PATH, self.link)

    @property
    def platforms(self) -> list[str]:
        return sorted({p for d in self.drivers for p in _PLATFORMS_BY_DRIVER.get(d, ())})

    @property
    def drivers_by_platform(self) -> dict[Platform, str]:
        """The driver each platform's orders run on: of the drivers serving a platform, the
        one serving the fewest platforms (``android-emulator`` before ``virtual``), then the
        first listed."""
        chosen: dict[Platform, str] = {}
        ranked = sorted(self.drivers, key=lambda d: len(_PLATFORMS_BY_DRIVER.get(d, ())))
        for driver in ranked:
            for platform in _PLATFORMS_BY_DRIVER.get(driver, ()):
                chosen.setdefault(Platform(platform), driver)
        return chosen


class _EgressOverLink:
    """The supervisor's `EgressDialer`: ``egress`` streams over the newest of the links'
    sessions (docs/protocol.md 6; two links: either replica serves them); `LinkDown` while
    there is none or it breaks. ``events`` lets one link at a time send the supervisor's
    instance events (the outbox has one reader)."""

    def __init__(self) -> None:
        self.sessions: list[Session] = []
        self.events = trio.Lock()

    @property
    def session(self) -> Session | None:
        return self.sessions[-1] if self.sessions else None

    async def __call__(self, instance_id: str, fields: dict[str, Any]) -> trio.abc.Stream:
        session = self.session
        if session is None:
            await trio.lowlevel.checkpoint()
            raise LinkDown("the host's link to the server is down")
        try:
            stream = await session.open_stream()
        except (MuxError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise LinkDown(f"the host's link to the server: {exc}") from exc
        fields = dict(fields)
        kind = str(fields.pop("kind", "egress"))  # or "build_log" (supervisor.report_build)
        try:
            await request_open(stream, kind, instance_id=instance_id, **fields)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, MuxError | trio.BrokenResourceError | trio.ClosedResourceError):
                raise LinkDown(f"the host's link to the server: {exc}") from exc
            raise
        return stream


def _openers(config: HostdConfig) -> dict[Platform, DriverOpener]:
    known = drivers_by_name(emulator=config.emulator, xcode=config.xcode)
    return {
        platform: known[name]
        for platform, name in config.drivers_by_platform.items()
        if name in known
    }


async def serve_hostd(
    config: HostdConfig,
    *,
    shutdown: trio.Event | None = None,
    task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the host until *shutdown* is set (then stop cleanly) or a permanent refusal
    (`PermanentLinkError`)."""
    shutdown = trio.Event() if shutdown is None else shutdown
    egress = _EgressOverLink()
    await trio.to_thread.run_sync(prepare_data_dir, config.data_dir)  # 0700, no stale sandboxes
    tls = await trio.to_thread.run_sync(client_context, config.ca_file)
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(
                nursery,
                config.data_dir,
                capacity=config.capacity,
                drivers=_openers(config),
                egress=egress,
                net_policy=config.net_policy,
                server_url=config.server_url,
                tls=tls,
                browser=config.browser,
            )
            if config.metrics_listen is not None:
                await nursery.start(
                    serve_metrics, supervisor, config.capacity, *config.metrics_listen
                )
            task_status.started(supervisor)
            # two links to two replicas when the server names several (core/replica_links.py)
            slots = LinkSlots(config.link_url, HOST_PATH)
            try:
                async with trio.open_nursery() as links:
                    for slot in range(slots.slots):
                        registered = _Registered(config, supervisor, egress, shutdown, slots, slot)
                        links.start_soon(
                            partial(
                                run_link,
                                slots.target(slot, shutdown),
                                config.token,
                                partial(_hello, config, supervisor, slots),
                                slots.serve(slot, registered),
                                backoff=Backoff(base=config.backoff_base, first=FIRST_RETRY_S),
                                shutdown=shutdown,
                                ssl_context=tls,
                            )
                        )
            finally:
                supervisor.stop_all()
                # the link is over: waiting for the events to be sent would wait the whole
                # grace for nothing (every `devyard up` stop took 10 s more once an
                # instance had run)
                with trio.move_on_after(_STOP_GRACE, shield=True):
                    await supervisor.wait_stopped()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        refused = find_in_group(group, LinkRefused)
        if refused is None:
            raise
        raise _explain(refused) from refused


def _hello(config: HostdConfig, supervisor: Supervisor, slots: LinkSlots) -> dict[str, Any]:
    links = slots.links_wanted()
    return {
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
        # What runs here now (empty after a restart): the server ends the rest (section 7).
        # Not while another link is up (two links): that link's registration reconciled, and
        # an order it took after this hello was built must not be ended by this one's.
        **({} if slots.linked() else {"instances": supervisor.running()}),
        # two links to two replicas (docs/protocol.md 7): neither is the other's stale copy
        **({"links": links} if links > 1 else {}),
    }


@attrs.frozen
class _Registered:
    """hostd's part of a registered link: orders in, events out, device streams served."""

    config: HostdConfig
    supervisor: Supervisor
    egress: _EgressOverLink
    shutdown: trio.Event
    slots: LinkSlots
    slot: int

    async def __call__(
        self, session: Session, control: ControlChannel, registered: dict[str, Any]
    ) -> None:
        replica = registered.get("replica")
        where = f"replica {replica} (link {self.slot})" if replica else self.config.link_url
        log.info("registered with %s as %s", where, registered.get("host_id"))
        await _serve_registered(self, session, control)


async def _serve_registered(link: _Registered, session: Session, control: ControlChannel) -> None:
    supervisor, egress, shutdown = link.supervisor, link.egress, link.shutdown
    egress.sessions.append(session)
    moved: list[trio.Event] = []  # the server drains: the next link's registration
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_streams, session, supervisor.endpoint)
            events = trio.CancelScope()
            nursery.start_soon(_in_scope, events, partial(_send_events, control, link))
            await race(partial(_receive_orders, control, link, moved), shutdown.wait)
            if moved and not shutdown.is_set():  # make before break (docs/protocol.md 7)
                events.cancel()  # the next link reports the events
                with trio.move_on_after(MOVE_OVERLAP):
                    await race(moved[0].wait, shutdown.wait)
                with trio.move_on_after(_MOVE_GRACE):
                    await race(partial(wait_streams_done, session), shutdown.wait)
            elif shutdown.is_set():  # clean stop: say so, GO_AWAY, stop instances, report them
                with (
                    trio.move_on_after(_SAY_GRACE),
                    contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
                ):
                    await control.send({"type": "shutdown", "reason": "host daemon stopping"})
                session.go_away_nowait()
                supervisor.stop_all()
                with trio.move_on_after(_STOP_GRACE):
                    await supervisor.wait_idle()
            nursery.cancel_scope.cancel()
    finally:
        egress.sessions.remove(session)


async def _in_scope(scope: trio.CancelScope, task: Callable[[], Awaitable[object]]) -> None:
    with scope:
        await task()


async def _receive_orders(
    control: ControlChannel, link: _Registered, moved: list[trio.Event]
) -> None:
    """Orders until the control stream ends (`LinkLost`), or until the server drains: then
    the next link is dialled (`hand_over`) and this returns. ``replicas``: the replica set
    changed (two links)."""
    supervisor = link.supervisor
    while True:
        try:
            message = await control.receive()
        except trio.EndOfChannel:
            raise LinkLost("the edge closed the control stream") from None
        kind = message.get("type")
        if kind == "instance_start" and isinstance(message.get("order"), dict):
            supervisor.start(message["order"])
        elif kind == "instance_stop":
            supervisor.stop(str(message.get("instance_id")))
        elif kind == "error":
            raise_for_error(message)
        elif kind == "shutdown":
            log.info("the edge is shutting down (%s)", message.get("reason"))
        elif kind == "replicas":
            link.slots.learn(message)
        elif kind == "drain":
            link.slots.moving(link.slot)
            arrived = hand_over()
            if arrived is not None:
                log.info("the server drains: linking again; this link ends with its streams")
                moved.append(arrived)
                return
        else:
            log.warning("unknown control message %r", kind)


async def _send_events(control: ControlChannel, link: _Registered) -> None:
    """The supervisor's events, on this link while it is the one that holds the outbox (with
    two links, the other takes over when this one ends; an event sent but not yet popped
    then goes again: the server takes a repeated event as the same state)."""
    supervisor = link.supervisor
    async with link.egress.events:
        while True:
            await supervisor.wait_outbox()
            message = supervisor.outbox_peek()
            if message is not None:
                await control.send(message)
                supervisor.outbox_pop()


async def run_hostd(config: HostdConfig, *, err: TextIO) -> int:
    """``devyard hostd``'s trio main: signals, the daemon, a clear message on a permanent end.

    The first SIGINT/SIGTERM stops cleanly (exit 0), a second one at once (`EXIT_INTERRUPTED`);
    a permanent refusal exits `EXIT_PERMANENT`."""
    try:
        outcome = await run_until_signalled(
            lambda shutdown: serve_hostd(config, shutdown=shutdown),
            graceful="stopping (instances are stopped, the edge is told)",
        )
    except PermanentLinkError as exc:
        print(f"devyard hostd: error: {exc}", file=err, flush=True)
        return exc.exit_code
    return EXIT_INTERRUPTED if isinstance(outcome, Stopped) else 0
