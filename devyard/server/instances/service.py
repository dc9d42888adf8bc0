"""`InstanceService`: creates, ends and watches instances; the edge's `InstanceEvents`.

Theory of operation. The store row is the truth about an instance; every change goes through
the lifecycle table (`lifecycle.py`) as a compare-and-set on the row, so a delete racing a
timeout or a host event ends the instance exactly once. What lives only in memory is what a
restart may lose without harm: ``trio.Event``s that ``wait_ready`` callers sleep on, and the
timeout deadlines, which `run` rebuilds from the live rows when it starts (a restart grants
a fresh inactivity period).

Creation never leaves an instance stuck in ``creating``: placement fails *before* a row is
written when no host has room (`NoCapacity`), and an order that no host accepts terminates
the row with ``Error`` before the caller hears `NoCapacity`. Ending an instance writes the
row first (state), then tells the host under a bounded, shielded grace.

Timeouts run in one task, `run`, owned by the server's nursery: it sleeps until the earliest
deadline (or until a new one is set) and ends what is due. Inactivity counts from ``ready``
and from every `touch` (the edge calls it on any client traffic to the instance); the hard
timeout counts from creation.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn, Protocol

import attrs
import trio

from ...core.selectors import android_compatible, parse_selectors
from ..hosts import (
    HostInfo,
    HostRegistry,
    HostUnavailableError,
    InstanceAccess,
    InstanceAccessError,
    InstanceEvent,
    InstanceOrder,
    InstancePhase,
    InstanceRoute,
)
from ..store import errors as store_errors
from ..store import tokens
from ..store.base import Instance, InstanceState, Organization, Platform, Store, TerminationReason
from .durations import format_duration, parse_duration
from .lifecycle import IllegalTransition, LifecycleEvent, expected_for, next_state
from .placement import (
    ClientLocation,
    NoCapacity,
    PlacementRequest,
    RegionInfo,
    place,
    preferred_region,
)

log = logging.getLogger(__name__)


class TunnelStatusSource(Protocol):
    """Whether a tunnel is held by a connector now (the edge's connector hub)."""

    def status(self, org_id: str, name: str) -> Any: ...


class TunnelRejectedError(Exception):
    """The tunnel an instance names cannot be used; an HTTP status, reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


__all__ = ["EmptyRegistry", "InstanceService", "NewInstance"]

INSTANCE_TOKEN_PREFIX: Final = "dyi"  # noqa: S105 - a prefix, not a secret
STREAM_TOKEN_PREFIX: Final = "dys"  # noqa: S105 - a prefix, not a secret
STOP_GRACE: Final = 10.0  # seconds a host gets to take a stop order


class EmptyRegistry:
    """A registry with no hosts: a real configuration (the control plane alone), in which
    every create answers "no capacity"."""

    def hosts(self) -> list[HostInfo]:
        return []

    async def start_instance(self, host_id: str, order: InstanceOrder) -> None:
        await trio.lowlevel.checkpoint()
        raise HostUnavailableError(host_id)

    async def stop_instance(self, host_id: str, instance_id: str) -> None:
        await trio.lowlevel.checkpoint()


@attrs.frozen
class NewInstance:
    """A create request, already checked against the document."""

    platform: Platform
    labels: dict[str, str]
    display_name: str | None
    spec: dict[str, Any]
    client_ip: str | None = None
    # spec.initialAssets resolved by the API: one entry per file with a download URL
    initial_assets: tuple[dict[str, Any], ...] = ()


@attrs.define
class _Deadlines:
    inactivity_s: int
    hard_at: float | None  # trio time
    idle_since: float | None = None  # trio time of ready or last touch; None until ready


def _placement_request(new: NewInstance) -> PlacementRequest:
    spec = new.spec
    client_ip, location = new.client_ip, None
    for clue in spec.get("clues", []):
        if clue.get("kind") == "ClientIP" and clue.get("clientIp"):
            client_ip = clue["clientIp"]
        elif clue.get("kind") == "ClientLocation":
            location = ClientLocation(float(clue["latitude"]), float(clue["longitude"]))
    return PlacementRequest(
        platform=new.platform.value,
        region=spec.get("region"),
        jurisdiction=spec.get("jurisdiction"),
        client_ip=client_ip,
        client_location=location,
    )


def normalise_spec(spec: dict[str, Any], organization: Organization) -> dict[str, Any]:
    """The spec as stored and echoed: timeouts parsed (InvalidDuration names the field) and
    written back normalised, the inactivity default filled from the organization (also for
    ``0``, as the SDKs document it: an instance always has an inactivity timeout)."""
    out = dict(spec)
    inactivity = out.get("inactivityTimeout")
    seconds = 0 if inactivity is None else parse_duration("spec.inactivityTimeout", inactivity)
    seconds = seconds or organization.settings.inactivity_timeout_s
    out["inactivityTimeout"] = format_duration(seconds)
    out["hardTimeout"] = format_duration(
        parse_duration("spec.hardTimeout", out.get("hardTimeout", "0"))
    )
    return out


class InstanceService:
    def __init__(
        self,
        store: Store,
        registry: HostRegistry,
        *,
        regions: Sequence[RegionInfo] = (),
        home_region: str = "local",
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._store = store
        self.store = store
        self.registry = registry
        self._regions = tuple(regions)
        self._home = home_region
        self._clock = clock
        self._ready: dict[str, trio.Event] = {}
        self._deadlines: dict[str, _Deadlines] = {}
        self._wakeup = trio.Event()
        self.tunnels: TunnelStatusSource | None = None  # the edge's connector hub, when wired

    def __repr__(self) -> str:
        return f"<InstanceService {len(self._deadlines)} live>"

    # -- creating --------------------------------------------------------------------------
    async def create(
        self, organization: Organization, new: NewInstance, *, reuse: bool
    ) -> Instance:
        spec = normalise_spec(new.spec, organization)
        tunnel = await self._tunnel_for(organization.id, new.platform, spec.get("tunnel"))
        request = _placement_request(new)
        hosts = self.registry.hosts()
        try:
            placement = place(self._regions, hosts, request, home=self._home)
        except NoCapacity:
            if reuse:
                region = preferred_region(self._regions, hosts, request, home=self._home)
                found = await self._find_live(organization.id, new, region)
                if found is not None:
                    return found
            raise
        if reuse:
            found = await self._find_live(organization.id, new, placement.region)
            if found is not None:
                return found
        token = tokens.new_secret(INSTANCE_TOKEN_PREFIX).plaintext
        stream_token = tokens.new_secret(STREAM_TOKEN_PREFIX).plaintext
        instance = await self._store.create_instance(
            org_id=organization.id,
            platform=new.platform,
            region=placement.region,
            labels=new.labels,
            spec=spec,
            display_name=new.display_name,
            token=token,
            stream_token=stream_token,
        )
        order = InstanceOrder(
            instance_id=instance.id,
            organization_id=organization.id,
            platform=new.platform.value,
            model=spec.get("model"),
            os_version=_os_version(spec),
            spec=spec,
            initial_assets=new.initial_assets,
            tunnel=tunnel,
        )
        self._ready[instance.id] = trio.Event()
        hard = parse_duration("spec.hardTimeout", spec["hardTimeout"])
        self._deadlines[instance.id] = _Deadlines(
            inactivity_s=parse_duration("spec.inactivityTimeout", spec["inactivityTimeout"]),
            hard_at=None if hard == 0 else self._clock() + hard,
        )
        self._wakeup.set()
        try:
            for host in placement.hosts:
                try:
                    await self.registry.start_instance(host.id, order)
                except HostUnavailableError:
                    log.info("host %s refused %s; trying the next", host.id, instance.id)
                    continue
                return await self._advance(instance.id, LifecycleEvent.ASSIGNED, host_id=host.id)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._end(instance.id, TerminationReason.ERROR, "creation interrupted")
            raise
        await self._end(instance.id, TerminationReason.ERROR, "no host accepted the instance")
        raise NoCapacity(f"no host accepted the {new.platform.value} instance; retry later")

    async def _tunnel_for(
        self, org_id: str, platform: Platform, name: object
    ) -> dict[str, Any] | None:
        """The tunnel an instance names, checked before anything is created (spec 4.1 rule 3):
        it exists, on Android every exact selector port is >= 1024, and a connector holds it
        (the one retryable failure comes last)."""
        if name is None:
            return None
        if platform not in (Platform.IOS, Platform.ANDROID):
            message = "spec.tunnel is for iOS and Android instances"
            raise TunnelRejectedError(422, "tunnel_unsupported", message)
        if not isinstance(name, str) or not name:
            raise TunnelRejectedError(422, "invalid_body", "spec.tunnel must be a tunnel name")
        try:
            tunnel = await self._store.get_tunnel(org_id, name)
        except store_errors.NotFound:
            raise TunnelRejectedError(
                404, "tunnel_not_found", f"tunnel {name!r} does not exist in this organization"
            ) from None
        if platform is Platform.ANDROID and not android_compatible(
            parse_selectors(tunnel.selectors)
        ):
            raise TunnelRejectedError(
                422,
                "tunnel_selectors",
                f"tunnel {name!r} has an exact selector port below 1024, which Android "
                "instances cannot use: every exact selector port must be 1024 or higher",
            )
        if self.tunnels is None or not self.tunnels.status(org_id, name).online:
            raise TunnelRejectedError(
                409,
                "tunnel_offline",
                f"tunnel {name!r} is offline: no connector holds it (a connector that started "
                "seconds ago can still show offline; retry)",
            )
        return {
            "name": tunnel.name,
            "selectors": list(tunnel.selectors),
            "selector_version": tunnel.selector_version,
        }

    async def route(self, host_id: str, instance_id: str) -> InstanceRoute:
        """`InstanceDirectory.route`: the tunnel behind a host's egress for *instance_id*."""
        try:
            instance = await self._store.get_instance(instance_id)
        except store_errors.NotFound:
            raise InstanceAccessError(404, "not_found", f"no instance {instance_id}") from None
        if instance.host_id != host_id:
            raise InstanceAccessError(404, "not_found", f"{instance_id} is not on this host")
        if instance.state is InstanceState.TERMINATED:
            raise InstanceAccessError(410, "gone", f"instance {instance_id} was terminated")
        tunnel = instance.spec.get("tunnel")
        if not isinstance(tunnel, str):
            raise InstanceAccessError(400, "bad_request", f"{instance_id} is not on a tunnel")
        return InstanceRoute(instance.id, instance.org_id, tunnel)

    async def _find_live(self, org_id: str, new: NewInstance, region: str) -> Instance | None:
        try:
            return await self._store.find_live_instance(org_id, new.platform, region, new.labels)
        except store_errors.NotFound:
            return None

    async def wait_ready(self, instance_id: str) -> None:
        """Returns once the instance left ``creating``/``assigned`` (or is unknown here).
        Bound it with the caller's cancel scope."""
        event = self._ready.get(instance_id)
        if event is None:
            await trio.lowlevel.checkpoint()
            return
        await event.wait()

    # -- ending ----------------------------------------------------------------------------
    async def delete(self, org_id: str, instance_id: str) -> Instance:
        """Ends the instance (UserRequested); an instance already gone is returned as is."""
        instance = await self._store.get_instance(instance_id, org_id=org_id)
        if not instance.live:
            return instance
        return await self._end(instance_id, TerminationReason.USER_REQUESTED, None)

    async def _end(
        self, instance_id: str, reason: TerminationReason, error_message: str | None
    ) -> Instance:
        try:
            instance = await self._store.transition_instance(
                instance_id,
                next_state(InstanceState.READY, LifecycleEvent.TERMINATE),
                expected=expected_for(LifecycleEvent.TERMINATE),
                error_message=error_message,
                termination_reason=reason,
            )
        except store_errors.Conflict:
            instance = await self._store.get_instance(instance_id)  # someone ended it first
        self._forget(instance_id)
        if instance.host_id is not None and reason is not TerminationReason.HOST_LOST:
            with trio.move_on_after(STOP_GRACE, shield=True):
                await self.registry.stop_instance(instance.host_id, instance_id)
        log.info("instance %s terminated: %s", instance_id, instance.termination_reason)
        return instance

    def _forget(self, instance_id: str) -> None:
        self._deadlines.pop(instance_id, None)
        event = self._ready.pop(instance_id, None)
        if event is not None:
            event.set()

    async def _advance(
        self, instance_id: str, event: LifecycleEvent, *, host_id: str | None = None
    ) -> Instance:
        instance = await self._store.get_instance(instance_id)
        try:
            to = next_state(instance.state, event)
            return await self._store.transition_instance(
                instance_id, to, expected=expected_for(event), host_id=host_id
            )
        except (IllegalTransition, store_errors.Conflict):
            return await self._store.get_instance(instance_id)  # another trigger won

    # -- the edge's events (hosts.InstanceEvents) ------------------------------------------
    async def on_instance_event(self, host_id: str, event: InstanceEvent) -> None:
        try:
            instance = await self._store.get_instance(event.instance_id)
        except store_errors.NotFound:
            log.warning("host %s reported unknown instance %s", host_id, event.instance_id)
            return
        if event.phase is InstancePhase.READY:
            if instance.state is InstanceState.CREATING:  # READY overtook our own write
                instance = await self._advance(
                    instance.id, LifecycleEvent.ASSIGNED, host_id=host_id
                )
            instance = await self._advance(instance.id, LifecycleEvent.READY)
            if instance.state is InstanceState.READY:
                deadlines = self._deadlines.get(instance.id)
                if deadlines is not None:
                    deadlines.idle_since = self._clock()
                    self._wakeup.set()
                ready = self._ready.pop(instance.id, None)
                if ready is not None:
                    ready.set()
        elif instance.live:
            message = event.error_message or f"the instance stopped on host {host_id}"
            await self._end(instance.id, TerminationReason.ERROR, message)

    async def on_host_lost(self, host_id: str) -> None:
        for instance in await self._store.list_live_instances(host_id=host_id):
            await self._end(instance.id, TerminationReason.HOST_LOST, f"host {host_id} is gone")

    async def authorize(self, instance_id: str, token: str) -> InstanceAccess:
        """`InstanceDirectory`: may *token* reach the per-instance endpoints of *instance_id*?"""
        try:
            instance = await self._store.get_instance(instance_id)
        except store_errors.NotFound:
            raise InstanceAccessError(404, "not_found", f"no instance {instance_id}") from None
        if instance.state is InstanceState.TERMINATED:
            why = instance.termination_reason.value if instance.termination_reason else "ended"
            raise InstanceAccessError(410, "gone", f"instance {instance_id} was terminated ({why})")
        full = bool(instance.token) and hmac.compare_digest(
            token.encode(), str(instance.token).encode()
        )
        stream = bool(instance.stream_token) and hmac.compare_digest(
            token.encode(), str(instance.stream_token).encode()
        )
        if not (full or stream):
            raise InstanceAccessError(
                401, "unauthorized", f"the token does not open instance {instance_id}"
            )
        if instance.state is not InstanceState.READY or instance.host_id is None:
            raise InstanceAccessError(
                409,
                "not_ready",
                f"instance {instance_id} is {instance.state.value}, not ready yet",
            )
        return InstanceAccess(
            instance_id=instance.id,
            host_id=instance.host_id,
            platform=instance.platform.value,
            stream_only=not full,
        )

    def touch(self, instance_id: str) -> None:
        """Client traffic to the instance: its inactivity period starts again."""
        deadlines = self._deadlines.get(instance_id)
        if deadlines is not None and deadlines.idle_since is not None:
            deadlines.idle_since = self._clock()

    # -- timeouts --------------------------------------------------------------------------
    def _due(self, now: float) -> tuple[list[tuple[str, TerminationReason]], float]:
        due: list[tuple[str, TerminationReason]] = []
        earliest = float("inf")
        for instance_id, d in self._deadlines.items():
            candidates = []
            if d.hard_at is not None:
                candidates.append((d.hard_at, TerminationReason.HARD_TIMEOUT))
            if d.idle_since is not None and d.inactivity_s > 0:
                candidates.append(
                    (d.idle_since + d.inactivity_s, TerminationReason.INACTIVITY_TIMEOUT)
                )
            for at, reason in sorted(candidates, key=lambda c: c[0]):
                if at <= now:
                    due.append((instance_id, reason))
                    break
                earliest = min(earliest, at)
        return due, earliest

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Ends instances whose timeouts are due; runs until cancelled."""
        now = self._clock()
        for instance in await self._store.list_live_instances():
            hard = parse_duration("spec.hardTimeout", instance.spec.get("hardTimeout", "0"))
            inactivity = parse_duration(
                "spec.inactivityTimeout", instance.spec.get("inactivityTimeout", "0")
            )
            self._deadlines.setdefault(
                instance.id,
                _Deadlines(
                    inactivity_s=inactivity,
                    hard_at=None if hard == 0 else now + hard,
                    idle_since=now if instance.state is InstanceState.READY else None,
                ),
            )
        task_status.started()
        while True:
            self._wakeup = trio.Event()
            due, earliest = self._due(self._clock())
            for instance_id, reason in due:
                self._deadlines.pop(instance_id, None)
                try:
                    await self._end(instance_id, reason, None)
                except store_errors.StoreError:
                    log.exception("could not end %s after its %s", instance_id, reason)
            if due:
                continue
            with trio.move_on_at(earliest):
                await self._wakeup.wait()

    # -- reading, for the API: the only way a route sees instances -----------------------
    async def get(self, org_id: str, platform: Platform, instance_id: str) -> Instance:
        """The organization's instance of *platform*; `store.errors.NotFound` otherwise (in
        another organization, or of another platform, is the same as absent)."""
        instance = await self._store.get_instance(instance_id, org_id=org_id)
        if instance.platform is not platform:
            raise store_errors.NotFound("instance", instance_id)
        return instance

    async def list(
        self,
        org_id: str,
        platform: Platform,
        *,
        labels: dict[str, str] | None = None,
        states: frozenset[InstanceState] | None = None,
        region: str | None = None,
        limit: int = 50,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> list[Instance]:
        """One page of the organization's instances of *platform*, in id order."""
        return await self._store.list_instances(
            org_id,
            platform,
            labels=labels,
            states=states,
            region=region,
            limit=limit,
            starting_after=starting_after,
            ending_before=ending_before,
        )


def _os_version(spec: dict[str, Any]) -> str | None:
    for clue in spec.get("clues", []):
        if clue.get("kind") == "OSVersion":
            value = clue.get("osVersion")
            return None if value is None else str(value)
    return None
