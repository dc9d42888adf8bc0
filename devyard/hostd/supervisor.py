"""The host's instances: started and stopped by orders, independent of the link.

Each instance runs a device (`open_device`) in the supervisor's own nursery with a sandbox dir
``DATA_DIR/instances/<id>`` that the driver removes on stop. What happens to an instance is
queued as an ``instance_event`` message in the outbox, which the link drains whenever it is up:
a short link outage loses neither instances nor events. The outbox is bounded by capacity (at
most two events per instance) and instances by ``capacity``.

The supervisor never sees the link: it reaches the edge only through the `EgressDialer` it is
given (which raises `LinkDown` while there is no link), and each order runs on the driver that
serves its platform (``drivers``). Whatever one instance raises ends that instance only: it is
logged once and reported as ``terminated`` with the reason; the other instances keep running.

A tunnel-attached instance's egress proxy (egress.py) starts before its device opens and stops
after it closes: the driver gets it, credentials included, in `DeviceSpec.http_proxy` (an
emulator launches through it). Once the tunnel answers a probe, the device's `DeviceNetwork`
names it, and a device whose network commands run on the host (the virtual device, not a
`GuestNetworkDevice`) gets it in its ``http_proxy`` setting.
"""

from __future__ import annotations

import logging
import shutil
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..core import OpenError, RemoteProtocolError, receive_message
from ..core._groups import leaves
from ..core.chrome_flags import ChromeFlagError
from ..core.selectors import parse_selectors
from . import metrics
from .browser import BrowserConfig, browser_config, run_browser_sandbox, wants_browser
from .builds import BuildHost
from .builds.sandbox_net import build_options
from .builds.server_cache import ServerCache
from .drivers import (
    AndroidDevice,
    DeviceDriver,
    DeviceError,
    DeviceSpec,
    DriverOpener,
    GuestNetworkDevice,
    Platform,
)
from .egress import EgressProxy
from .fetch import origin_of
from .initial_assets import forced_app, install_initial_assets, keep_in_foreground
from .netdial import DeviceNetwork, assign
from .netpolicy import NetPolicy

log = logging.getLogger(__name__)

__all__ = ["ATTACH_TIMEOUT_S", "EgressDialer", "LinkDown", "Supervisor"]

#: Spec 4.1: an instance on a tunnel that does not attach within 30 s fails.
ATTACH_TIMEOUT_S: Final = 30.0
_ATTACH_RETRY_S: Final = 0.5
#: How long an ended exec's record and log are retried while the link is down.
REPORT_TIMEOUT_S: Final = 300.0
_LOG_CHUNK: Final = 256 * 1024


class LinkDown(ConnectionError):
    """The host has no working link to the server right now (an `EgressDialer` raises it).

    A ConnectionError, so code that treats a failed dial as a network failure (the egress
    proxy answers 502) does so here too.
    """


#: Opens an ``egress`` stream to the edge for an instance (docs/protocol.md 6) with the open
#: request's extra *fields*; raises `LinkDown` without a link, `OpenError` when refused.
EgressDialer = Callable[[str, dict[str, Any]], Awaitable[trio.abc.Stream]]


@attrs.define
class _Instance:
    instance_id: str
    stop: trio.Event = attrs.field(factory=trio.Event)
    device: DeviceDriver | None = None  # set once the device is up (ready)


class Supervisor:
    """Runs instances in *nursery*; `start` / `stop` are synchronous (orders never block)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        data_dir: Path,
        *,
        capacity: int,
        drivers: Mapping[Platform, DriverOpener],
        egress: EgressDialer,
        net_policy: NetPolicy | None = None,
        server_url: str | None = None,
        tls: ssl.SSLContext | None = None,
        browser: BrowserConfig | None = None,
    ) -> None:
        self._nursery = nursery
        self.instances_dir = data_dir / "instances"
        self.capacity = capacity
        self.drivers = dict(drivers)
        self._egress = egress
        self._instances: dict[str, _Instance] = {}
        self._outbox: deque[dict[str, Any]] = deque()
        self._outbox_changed = trio.Event()
        self.attach_timeout = ATTACH_TIMEOUT_S
        self.net_policy = NetPolicy() if net_policy is None else net_policy  # netpolicy.py
        self._asset_origins = () if server_url is None else (server_url,)  # it signs asset URLs
        self._trusted = frozenset(o[1:] for o in map(origin_of, self._asset_origins) if o)
        self._tls = tls  # verifies https asset servers: the system store plus --ca-file
        # the browser sandbox's executable and limits (hostd/browser, docs/sandbox.md)
        self.browser = BrowserConfig() if browser is None else browser

    def __repr__(self) -> str:
        return f"Supervisor(running={sorted(self._instances)})"

    def running(self) -> list[str]:
        return sorted(self._instances)

    def device(self, instance_id: str) -> DeviceDriver | None:
        """The running device of a ready instance; None if it is not (or no longer) up."""
        instance = self._instances.get(instance_id)
        return None if instance is None or instance.stop.is_set() else instance.device

    def endpoint(self, instance_id: str) -> tuple[DeviceDriver, trio.Event] | None:
        """The device of a ready instance and the event set when the instance stops."""
        device = self.device(instance_id)
        return None if device is None else (device, self._instances[instance_id].stop)

    def sandbox_of(self, instance_id: str) -> Path:
        return self.instances_dir / instance_id

    # ---- orders ---------------------------------------------------------------------------

    def start(self, order: dict[str, Any]) -> None:
        instance_id = str(order.get("instance_id", ""))
        if not instance_id or "/" in instance_id or instance_id.startswith("."):
            log.warning("refusing an order with a bad instance id %r", instance_id)
            return
        running = self._instances.get(instance_id)
        if running is not None:  # a repeated order (after a reconnect, or from an adopter)
            if running.device is not None and not running.stop.is_set():
                # ready: say so again (the first `ready` may have died with a server replica)
                self._emit(instance_id, "ready", None)
            return  # starting: its `ready` is still to come
        if len(self._instances) >= self.capacity:
            self._emit(instance_id, "terminated", "host at capacity")
            return
        try:
            spec = DeviceSpec(
                platform=Platform(str(order.get("platform"))),
                instance_id=instance_id,
                sandbox_dir=self.sandbox_of(instance_id),
                model=order.get("model"),
                os_version=order.get("os_version"),
                organization_id=str(order.get("organization_id") or ""),
                **build_options(order.get("spec")),
            )
        except ValueError as exc:
            self._emit(instance_id, "terminated", f"bad order: {exc}")
            return
        opener = self.drivers.get(spec.platform)
        if opener is None:
            served = ", ".join(sorted(self.drivers)) or "none"
            self._emit(
                instance_id,
                "terminated",
                f"this host runs no {spec.platform} devices (platforms served: {served})",
            )
            return
        instance = _Instance(instance_id)
        self._instances[instance_id] = instance
        assets = list(order.get("initial_assets") or [])
        tunnel = order.get("tunnel") if isinstance(order.get("tunnel"), dict) else None
        browser = self._browser(order)
        if isinstance(browser, str):
            del self._instances[instance_id]
            self._emit(instance_id, "terminated", browser)
            return
        forced = forced_app(
            assets, order.get("spec") if isinstance(order.get("spec"), dict) else None
        )
        self._nursery.start_soon(
            partial(
                self._run, instance, spec, opener, assets, tunnel, browser=browser, forced=forced
            )
        )

    def _browser(self, order: dict[str, Any]) -> BrowserConfig | str | None:
        """The order's browser sandbox (hostd/browser), None, or why the order is bad."""
        order_spec = order.get("spec")
        if not isinstance(order_spec, dict):
            return None
        if not wants_browser(order_spec):
            return None
        try:
            return browser_config(order_spec, self.browser)
        except ChromeFlagError as exc:
            return f"bad order: {exc.message}"

    def stop(self, instance_id: str) -> None:
        instance = self._instances.get(instance_id)
        if instance is None:
            self._emit(instance_id, "terminated", None)  # already gone: say so again
            return
        instance.stop.set()

    def stop_all(self) -> None:
        for instance in self._instances.values():
            instance.stop.set()

    async def wait_idle(self) -> None:
        """Until no instance runs and every event has been sent."""
        while self._instances or self._outbox:
            await self._outbox_changed.wait()
        await trio.lowlevel.checkpoint()

    async def wait_stopped(self) -> None:
        """Until no instance runs (events may still be queued: with no link left to send
        them, the next hello's ``instances`` tells the server what runs)."""
        while self._instances:
            await self._outbox_changed.wait()
        await trio.lowlevel.checkpoint()

    # ---- tunnels ----------------------------------------------------------------------------

    def _proxy(self, instance_id: str, tunnel: dict[str, Any]) -> EgressProxy:
        """The instance's egress proxy (with fresh credentials) for *tunnel*'s selectors."""
        version = tunnel.get("selector_version")

        async def dial(host: str, port: int) -> trio.abc.Stream:
            dest = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            return await self._egress(instance_id, {"dest": dest, "selector_version": version})

        selectors = parse_selectors(str(s) for s in tunnel.get("selectors", []))
        return EgressProxy(instance_id, selectors, dial, policy=self.net_policy)

    async def _attach(
        self, instance_id: str, device: DeviceDriver, tunnel: dict[str, Any], proxy: EgressProxy
    ) -> None:
        """Probe through the tunnel until it answers (or fail the instance), then point the
        device's network at the instance's proxy (already serving: the device was opened with
        it in its spec)."""
        name = str(tunnel.get("name"))
        last = "no answer"
        with trio.move_on_after(self.attach_timeout) as scope:
            while True:
                try:
                    probe = await self._egress(instance_id, {"probe": True})
                except (OpenError, LinkDown) as exc:
                    last = str(exc)
                    await trio.sleep(_ATTACH_RETRY_S)
                    continue
                await probe.aclose()
                break
        if scope.cancelled_caught:
            raise DeviceError(
                f"tunnel {name!r} did not attach within {self.attach_timeout:g} s ({last})"
            )
        network = DeviceNetwork(self.net_policy, proxy.endpoint, self._trusted)
        assign(device, network)  # with its credentials
        guest = isinstance(device, GuestNetworkDevice) and device.guest_network
        if isinstance(device, AndroidDevice) and not guest:
            # The virtual device's network commands run on the host: the host's loopback is
            # theirs. An emulator's guest has its own, and its driver was given the proxy.
            await device.settings_put("global", "http_proxy", f"127.0.0.1:{proxy.port}")
        log.info("instance %s attached to tunnel %s (proxy port %d)", instance_id, name, proxy.port)

    # ---- build logs -------------------------------------------------------------------------

    async def report_build(self, instance_id: str, record: dict[str, Any], log_path: Path) -> None:
        """An ended exec's record and log to the server on a ``build_log`` stream
        (docs/builds.md), retried while the link is down, for at most `REPORT_TIMEOUT_S`."""
        delay = _ATTACH_RETRY_S
        with trio.move_on_after(REPORT_TIMEOUT_S):
            while True:
                try:
                    stream = await self._egress(
                        instance_id, {"kind": "build_log", "record": record}
                    )
                except LinkDown:
                    await trio.sleep(delay)
                    delay = min(10.0, delay * 2)
                    continue
                except OpenError as exc:
                    log.warning("build log of %s refused: %s", instance_id, exc)
                    return
                try:
                    await _send_log(stream, log_path)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError, RemoteProtocolError):
                    await trio.sleep(delay)
                finally:
                    await trio.aclose_forcefully(stream)
        log.warning("build log of %s not reported within %g s", instance_id, REPORT_TIMEOUT_S)

    # ---- the outbox the link drains -------------------------------------------------------

    def outbox_peek(self) -> dict[str, Any] | None:
        return self._outbox[0] if self._outbox else None

    def outbox_pop(self) -> None:
        self._outbox.popleft()
        self._changed()

    async def wait_outbox(self) -> None:
        while not self._outbox:
            await self._outbox_changed.wait()
        await trio.lowlevel.checkpoint()

    def _emit(self, instance_id: str, phase: str, error_message: str | None) -> None:
        self._outbox.append(
            {
                "type": "instance_event",
                "instance_id": instance_id,
                "phase": phase,
                "error_message": error_message,
            }
        )
        self._changed()

    def _changed(self) -> None:
        self._outbox_changed.set()
        self._outbox_changed = trio.Event()

    # ---- one instance ---------------------------------------------------------------------

    async def _run(
        self,
        instance: _Instance,
        spec: DeviceSpec,
        opener: DriverOpener,
        assets: list[dict[str, Any]],
        tunnel: dict[str, Any] | None,
        *,
        browser: BrowserConfig | None = None,
        forced: str | None = None,
    ) -> None:
        error: str | None = None
        try:
            async with trio.open_nursery() as network:
                proxy = None
                if tunnel is not None:  # serving before the device opens: its driver may need it
                    proxy = self._proxy(instance.instance_id, tunnel)
                    await network.start(proxy.serve)
                    spec = attrs.evolve(spec, http_proxy=proxy.endpoint.url)
                async with opener(spec) as device, trio.open_nursery() as tasks:
                    builds = getattr(device, "builds", None)  # a build instance's (builds/)
                    if isinstance(builds, BuildHost):
                        builds.reporter = partial(self.report_build, instance.instance_id)
                        to_server = partial(self._egress, instance.instance_id)
                        builds.cache.upstream = ServerCache(to_server)  # docs/builds.md
                    assign(device, DeviceNetwork(self.net_policy, trusted=self._trusted))
                    if tunnel is not None and proxy is not None:  # first: initial apps may need it
                        await self._attach(instance.instance_id, device, tunnel, proxy)
                    workdir = spec.sandbox_dir / "initial-assets"
                    await install_initial_assets(
                        device,
                        assets,
                        workdir,
                        policy=self.net_policy,
                        trusted=self._asset_origins,
                        tls=self._tls,
                    )
                    if browser is not None:  # dials like the device: its tunnel, its policy
                        direct = EgressProxy(instance.instance_id, (), None, policy=self.net_policy)
                        dial = direct.dial if proxy is None else proxy.dial
                        where = spec.sandbox_dir
                        await tasks.start(run_browser_sandbox, device, where, browser, dial)
                    if forced is not None:
                        tasks.start_soon(keep_in_foreground, device, forced)
                    instance.device = device
                    log.info("instance %s ready (%s)", instance.instance_id, spec.platform)
                    self._emit(instance.instance_id, "ready", None)
                    await instance.stop.wait()
                    tasks.cancel_scope.cancel()
                network.cancel_scope.cancel()  # the proxy outlives the device
        except* DeviceError as group:  # from the device, its tasks or the proxy's nursery
            error = "; ".join(str(exc) for exc in leaves(group))
            log.warning("instance %s failed: %s", instance.instance_id, error)
            metrics.DRIVER_ERRORS.labels("device").inc()
        except* Exception as group:  # a bug in a driver or the proxy: this instance only
            causes = "; ".join(f"{type(exc).__name__}: {exc}" for exc in leaves(group))
            error = "; ".join(filter(None, [error, f"internal error on the host ({causes})"]))
            log.error("instance %s crashed", instance.instance_id, exc_info=group)
            metrics.DRIVER_ERRORS.labels("crash").inc()
        finally:
            del self._instances[instance.instance_id]  # _emit below wakes wait_idle
            with trio.CancelScope(shield=True):  # the driver removes it; make sure
                await trio.to_thread.run_sync(
                    lambda: shutil.rmtree(spec.sandbox_dir, ignore_errors=True)
                )
            self._emit(instance.instance_id, "terminated", error)
            log.info("instance %s terminated", instance.instance_id)


async def _send_log(stream: trio.abc.Stream, log_path: Path) -> None:
    """The log's bytes, the end, then the server's one answer."""
    async with await trio.open_file(log_path, "rb") as source:
        while chunk := await source.read(_LOG_CHUNK):
            await stream.send_all(chunk)
    if isinstance(stream, trio.abc.HalfCloseableStream):
        await stream.send_eof()
    reply = await receive_message(stream)
    if not reply.get("ok"):
        log.warning("the server did not keep a build log: %s", reply.get("message"))
