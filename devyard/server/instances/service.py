"""`InstanceService`: creates, ends and watches instances, and consumes what hosts report.

Theory of operation. The store row is the truth about an instance; every change goes through
the lifecycle table (`lifecycle.py`) as a compare-and-set on the row, so a delete racing a
timeout or a host event ends the instance exactly once. What lives only in memory is what a
restart may lose without harm: ``trio.Event``s that ``wait_ready`` callers sleep on, and the
timeout deadlines, which `run` rebuilds from the live rows when it starts (a restart grants
a fresh inactivity period).

Creation never leaves an instance stuck in ``creating``: placement fails *before* a row is
written when no host has room (`NoCapacity`; placement and the hold on the chosen host's slot
are one step, with no await between, so concurrent creates never share a free slot), and an
order that no host accepts terminates the row with ``Error``. Ending an instance writes the
row first (state), then tells the host under a bounded, shielded grace.

Timeouts and host events run in `run`, owned by the server's nursery: one task sleeps until
the earliest deadline (or until a new one is set) and ends what is due; another consumes the
`HostEvent`s the edge publishes on a bounded channel (the service never is the edge's
callee). A store error while handling one event or one timeout is logged and contained: the
next one is handled. Inactivity counts from ``ready`` and from the last client traffic (the
edge's gateway writes it to the shared `Activity`); the hard timeout counts from creation.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NoReturn, Protocol

import attrs
import trio

from ...core.selectors import android_compatible, parse_selectors
from ..hosts import (
    Activity,
    HostEvent,
    HostInfo,
    HostLost,
    HostRegistered,
    HostRegistry,
    HostUnavailableError,
    InstanceEvent,
    InstanceOrder,
    InstancePhase,
    InstanceReported,
    TunnelRejected,
    TunnelRejection,
)
from ..store import errors as store_errors
from ..store import tokens
from ..store.base import Instance, InstanceState, Organization, Platform, Store, TerminationReason
from .durations import parse_duration
from .lifecycle import IllegalTransition, LifecycleEvent, expected_for, next_state
from .placement import NoCapacity, Placement, RegionInfo, place, preferred_region
from .requests import (
    NewInstance,
    check_platform_fields,
    normalise_spec,
    os_version,
    placement_request,
)
from .shared import SharedRegistry

log = logging.getLogger(__name__)


class TunnelStatusSource(Protocol):
    """Whether a tunnel is held by a connector now (the edge's connector hub)."""

    def status(self, org_id: str, name: str) -> Any: ...


__all__ = ["EmptyRegistry", "InstanceService", "NewInstance"]

INSTANCE_TOKEN_PREFIX: Final = "dyi"  # noqa: S105 - a prefix, not a secret
STREAM_TOKEN_PREFIX: Final = "dys"  # noqa: S105 - a prefix, not a secret
STOP_GRACE: Final = 10.0  # seconds a host gets to take a stop order
ORDER_BUFFER: Final = 64  # orders waiting for `run` to hand them out (create waits beyond)
#: errorMessage of an instance its host no longer runs when it links again
NOT_ON_HOST_AFTER_RESTART: Final = "the host restarted and no longer runs this device"
ORDER_LOST_IN_RESTART: Final = "the server restarted before a host took the order"
ORG_DELETED: Final = "the organization was deleted"


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
class _Delivery:
    order: InstanceOrder
    hosts: tuple[str, ...]  # placement's choice, best first


@attrs.define
class _Deadlines:
    inactivity_s: int
    hard_at: float | None  # trio time
    idle_since: float | None = None  # trio time of ready or last touch; None until ready


class InstanceService:
    def __init__(
        self,
        store: Store,
        registry: HostRegistry,
        *,
        events: trio.MemoryReceiveChannel[HostEvent] | None = None,
        tunnels: TunnelStatusSource | None = None,
        activity: Activity | None = None,
        regions: Sequence[RegionInfo] = (),
        home_region: str = "local",
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        """*registry* takes orders to hosts; *events* is what the hosts report (none: a
        control plane without an edge); *tunnels* says whether a tunnel is held (none: every
        tunnel is offline); *activity* is where the edge records client traffic."""
        self._store = store
        self._registry = registry
        self._shared = registry if isinstance(registry, SharedRegistry) else None
        self._events = events
        self._tunnels = tunnels
        self._activity = activity if activity is not None else Activity(clock)
        self._regions = tuple(regions)
        self._home = home_region
        self._clock = clock
        self._ready: dict[str, trio.Event] = {}
        self._deadlines: dict[str, _Deadlines] = {}
        self._wakeup = trio.Event()
        # Orders go to hosts from `run`'s nursery (create answers at once, with creating).
        self._orders, self._order_queue = trio.open_memory_channel[_Delivery](ORDER_BUFFER)
        self._delivering: dict[str, str] = {}  # instance id -> host its order is on its way to
        # Capacity held for creates and orders the registry does not count yet: reservation
        # (or instance) id -> host. Taken in the same step as placement (no await between), so
        # concurrent creates never see the same free slot; dropped in the same step as the
        # registry starts counting the order (`start_instance` counts it before it awaits).
        self._reserved: dict[str, str] = {}
        self._reservations = 0
        self._ordered_at: dict[str, float] = {}  # instance id -> when its host took the order

    def __repr__(self) -> str:
        return f"<InstanceService {len(self._deadlines)} live>"

    # -- creating --------------------------------------------------------------------------
    async def create(
        self,
        organization: Organization,
        new: NewInstance,
        *,
        reuse: bool,
        max_live: int | None = None,
    ) -> Instance:
        """*max_live*: how many instances of the platform the organization's plan lets run at
        once (None: no limit); the store checks it atomically (`LimitReached`)."""
        if organization.deleting:  # a deletion is under way; the store checks it again, atomically
            raise store_errors.OrganizationDeleting(organization.id)
        check_platform_fields(new.platform, new.spec)
        spec = normalise_spec(new.spec, organization)
        tunnel = await self._tunnel_for(organization.id, new.platform, spec.get("tunnel"))
        request = placement_request(new)
        hosts = self._hosts()
        try:
            placement = place(self._regions, hosts, request, home=self._home)
        except NoCapacity:
            if reuse:
                region = preferred_region(self._regions, hosts, request, home=self._home)
                found = await self._find_live(organization.id, new, region)
                if found is not None:
                    return found
            raise
        hold, first = await self._hold(placement, new.platform)
        bound = False
        try:
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
                max_live=max_live,
                created_by=new.created_by,
            )
            if self._shared is None:
                self._reserved[instance.id] = self._reserved.pop(hold)
            else:
                await self._shared.rebind(hold, instance.id)
            bound = True
        finally:
            await self._unhold(hold, bound=bound)
        order = InstanceOrder(
            instance_id=instance.id,
            organization_id=organization.id,
            platform=new.platform.value,
            model=spec.get("model"),
            os_version=os_version(spec),
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
        self._delivering[instance.id] = first
        ordered = (first, *(h.id for h in placement.hosts if h.id != first))
        try:
            await self._orders.send(_Delivery(order, ordered))
        except BaseException:
            self._unpend(instance.id)
            with trio.CancelScope(shield=True):
                await self._end(instance.id, TerminationReason.ERROR, "creation interrupted")
            raise
        return instance  # creating: the host's acceptance, assigned and ready follow

    async def _hold(self, placement: Placement, platform: Platform) -> tuple[str, str]:
        """Hold a slot for a create on the first of *placement*'s hosts with room: the hold's
        key and its host."""
        self._reservations += 1
        if self._shared is None:
            hold = f"reservation-{self._reservations}"
            self._reserved[hold] = placement.hosts[0].id  # no await since `place`: atomic
            return hold, placement.hosts[0].id
        # the shared store's reservation is the atomic step (other replicas race us)
        hold = f"hold-{secrets.token_hex(8)}"
        host_id = await self._shared.reserve(hold, [h.id for h in placement.hosts])
        if host_id is None:
            raise NoCapacity(f"no host with room for a {platform.value} instance now; retry")
        return hold, host_id

    async def _unhold(self, hold: str, *, bound: bool) -> None:
        self._reserved.pop(hold, None)
        if self._shared is not None and not bound:
            with trio.CancelScope(shield=True):
                await self._shared.release(hold)
        else:
            await trio.lowlevel.checkpoint_if_cancelled()

    async def _deliver(self, delivery: _Delivery) -> None:
        """Hand *delivery*'s order to the first of its hosts that takes it (assigned), else
        end the instance. Runs in `run`'s nursery, so a slow host delays nobody's answer."""
        instance_id = delivery.order.instance_id
        reserved_on = delivery.hosts[0] if delivery.hosts else None
        try:
            for host_id in delivery.hosts:
                if instance_id not in self._deadlines:  # ended meanwhile (a delete)
                    return
                self._delivering[instance_id] = host_id
                # The registry counts the order from its first step on: the hold goes now.
                self._reserved.pop(instance_id, None)
                if self._shared is not None and host_id != reserved_on:  # the slot moves
                    if await self._shared.reserve(instance_id, [host_id]) is None:
                        continue
                    reserved_on = host_id
                try:
                    await self._registry.start_instance(host_id, delivery.order)
                except HostUnavailableError:
                    log.info("host %s refused %s; trying the next", host_id, instance_id)
                    continue
                self._ordered_at[instance_id] = self._clock()
                instance = await self._advance(
                    instance_id, LifecycleEvent.ASSIGNED, host_id=host_id
                )
                if not instance.live:  # ended while the order was on its way
                    self._forget(instance_id)  # (perhaps before `create` registered it)
                    with trio.move_on_after(STOP_GRACE):
                        await self._registry.stop_instance(host_id, instance_id)
                return
            await self._end(instance_id, TerminationReason.ERROR, "no host accepted the instance")
        except store_errors.StoreError:
            log.exception("could not record where %s went", instance_id)
        finally:
            self._unpend(instance_id)

    def _unpend(self, instance_id: str) -> None:
        self._delivering.pop(instance_id, None)
        self._reserved.pop(instance_id, None)

    def _hosts(self) -> list[HostInfo]:
        """Connected hosts, counting the capacity held for creates and queued orders as
        running (placement)."""
        on_the_way = Counter(self._reserved.values())
        return [
            attrs.evolve(h, running=h.running + on_the_way[h.id]) for h in self._registry.hosts()
        ]

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
            raise TunnelRejected(TunnelRejection.UNSUPPORTED, message)
        if not isinstance(name, str) or not name:
            raise TunnelRejected(TunnelRejection.INVALID_NAME, "spec.tunnel must be a tunnel name")
        try:
            tunnel = await self._store.get_tunnel(org_id, name)
        except store_errors.NotFound:
            raise TunnelRejected(
                TunnelRejection.NOT_FOUND, f"tunnel {name!r} does not exist in this organization"
            ) from None
        if platform is Platform.ANDROID and not android_compatible(
            parse_selectors(tunnel.selectors)
        ):
            raise TunnelRejected(
                TunnelRejection.SELECTORS,
                f"tunnel {name!r} has an exact selector port below 1024, which Android "
                "instances cannot use: every exact selector port must be 1024 or higher",
            )
        if self._tunnels is None or not self._tunnels.status(org_id, name).online:
            raise TunnelRejected(
                TunnelRejection.OFFLINE,
                f"tunnel {name!r} is offline: no connector holds it (a connector that started "
                "seconds ago can still show offline; retry)",
            )
        return {
            "name": tunnel.name,
            "selectors": list(tunnel.selectors),
            "selector_version": tunnel.selector_version,
        }

    async def _find_live(self, org_id: str, new: NewInstance, region: str) -> Instance | None:
        """A live instance to reuse: never one whose host is not linked now (after a restart
        the store may still hold it live until the host's grace ends or it reconciles)."""
        try:
            found = await self._store.find_live_instance(org_id, new.platform, region, new.labels)
        except store_errors.NotFound:
            return None
        if found.host_id is not None and found.host_id not in {
            h.id for h in self._registry.hosts()
        }:
            return None
        return found

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

    async def end_organization(self, org_id: str) -> int:
        """Ends every live instance of *org_id* (its deletion): terminated, its host told, its
        capacity freed. Idempotent; returns how many it ended. Called once the organization
        is marked deleting, after which the store refuses its creates; it sweeps again until a
        pass finds nothing live, so a create that committed during a pass is ended too."""
        ended = 0
        while True:
            live = [i for i in await self._store.list_live_instances() if i.org_id == org_id]
            if not live:
                return ended
            for instance in live:
                await self._end(instance.id, TerminationReason.USER_REQUESTED, ORG_DELETED)
                ended += 1

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
        if self._shared is not None:
            await self._tell_shared(self._shared.release(instance_id))
            await self._tell_shared(self._shared.instance_changed(instance_id, instance.state))
        if instance.host_id is not None and reason is not TerminationReason.HOST_LOST:
            with trio.move_on_after(STOP_GRACE, shield=True):
                await self._registry.stop_instance(instance.host_id, instance_id)
        log.info("instance %s terminated: %s", instance_id, instance.termination_reason)
        return instance

    def _forget(self, instance_id: str) -> None:
        self._deadlines.pop(instance_id, None)
        self._ordered_at.pop(instance_id, None)
        self._activity.forget(instance_id)
        event = self._ready.pop(instance_id, None)
        if event is not None:
            event.set()

    async def _advance(
        self, instance_id: str, event: LifecycleEvent, *, host_id: str | None = None
    ) -> Instance:
        instance = await self._store.get_instance(instance_id)
        try:
            to = next_state(instance.state, event)
            instance = await self._store.transition_instance(
                instance_id, to, expected=expected_for(event), host_id=host_id
            )
        except (IllegalTransition, store_errors.Conflict):
            return await self._store.get_instance(instance_id)  # another trigger won
        if self._shared is not None:
            await self._tell_shared(self._shared.instance_changed(instance_id, instance.state))
        return instance

    async def _tell_shared(self, call: Awaitable[None]) -> None:
        """A write to the shared registry after the row changed: a failure is logged (the
        other replicas resynchronize from the store; a reservation goes with its host)."""
        try:
            await call
        except Exception:  # the database may be away; the row is already right
            log.exception("could not tell the other replicas")

    async def on_instance_changed(self, instance_id: str, state: str) -> None:
        """Another replica changed *instance_id* (cluster mode): a READY starts its
        inactivity period here and wakes `wait_ready`; an end forgets it here."""
        await trio.lowlevel.checkpoint()
        if state == InstanceState.READY.value:
            deadlines = self._deadlines.get(instance_id)
            if deadlines is not None and deadlines.idle_since is None:
                deadlines.idle_since = self._clock()
                self._wakeup.set()
            ready = self._ready.pop(instance_id, None)
            if ready is not None:
                ready.set()
        elif state == InstanceState.TERMINATED.value:
            self._forget(instance_id)

    # -- what hosts report (the edge's HostEvents) ------------------------------------------
    async def handle(self, event: HostEvent) -> None:
        """One event the edge published; a store error is logged and contained."""
        try:
            if isinstance(event, InstanceReported):
                await self.on_instance_event(event.host_id, event.event)
            elif isinstance(event, HostLost):
                await self.on_host_lost(event.host_id)
            elif isinstance(event, HostRegistered):
                await self.on_host_registered(event)
        except store_errors.StoreError:
            log.exception("could not handle %r; the next event is handled", event)
        except Exception:  # a bug with one event ends its handling, not the service
            log.exception("handling %r failed; the next event is handled", event)

    async def on_host_registered(self, event: HostRegistered) -> None:
        """Reconcile the store with what the host says it runs: an instance the store holds
        live there but the host does not run ends (HostLost, with the reason); one the host
        runs but the store holds ended (or never heard of) is stopped on the host. Orders the
        host took after it registered are not in its list and are left alone."""
        if event.instances is None:  # an older host that does not say: nothing to compare
            await trio.lowlevel.checkpoint()
            return
        for instance in await self._store.list_live_instances(host_id=event.host_id):
            ordered = self._ordered_at.get(instance.id)
            if ordered is None and self._shared is not None:  # sent by another replica
                ordered = self._shared.ordered_at(instance.id)
            if instance.id in event.instances or (ordered is not None and ordered >= event.at):
                continue
            log.warning("host %s no longer runs %s", event.host_id, instance.id)
            await self._end(instance.id, TerminationReason.HOST_LOST, NOT_ON_HOST_AFTER_RESTART)
        for instance_id in sorted(event.instances):
            try:
                live = (await self._store.get_instance(instance_id)).live
            except store_errors.NotFound:
                live = False
            if not live:
                log.warning(
                    "host %s runs %s, which has ended: stopping it", event.host_id, instance_id
                )
                with trio.move_on_after(STOP_GRACE):
                    await self._registry.stop_instance(event.host_id, instance_id)

    async def on_instance_event(self, host_id: str, event: InstanceEvent) -> None:
        # Where its order is going, read before the row: a delivery that completes meanwhile
        # has written the host into the row by the time the row is read.
        delivering = self._delivering.get(event.instance_id)
        if delivering is None and self._shared is not None:  # perhaps ordered by another replica
            delivering = await self._shared.reserved_on(event.instance_id)
        try:
            instance = await self._store.get_instance(event.instance_id)
        except store_errors.NotFound:
            log.warning("host %s reported unknown instance %s", host_id, event.instance_id)
            return
        if not _placed_on(instance, delivering, host_id):
            log.warning(
                "host %s reported %s %s, which is not placed on it: ignored",
                host_id,
                event.phase.value,
                event.instance_id,
            )
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

    def touch(self, instance_id: str) -> None:
        """Client traffic to the instance: its inactivity period starts again."""
        self._activity.touch(instance_id)

    # -- timeouts --------------------------------------------------------------------------
    def _due(self, now: float) -> tuple[list[tuple[str, TerminationReason]], float]:
        due: list[tuple[str, TerminationReason]] = []
        earliest = float("inf")
        for instance_id, d in self._deadlines.items():
            candidates = []
            if d.hard_at is not None:
                candidates.append((d.hard_at, TerminationReason.HARD_TIMEOUT))
            if d.idle_since is not None and d.inactivity_s > 0:
                touched = self._activity.last(instance_id)
                if touched is not None and touched > d.idle_since:
                    d.idle_since = touched
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
        """Ends instances whose timeouts are due and handles what hosts report; runs until
        cancelled."""
        now = self._clock()
        for instance in await self._store.list_live_instances():
            if instance.state is InstanceState.CREATING and instance.id not in self._delivering:
                # No host took its order before the server stopped: nobody will.
                await self._end(instance.id, TerminationReason.ERROR, ORDER_LOST_IN_RESTART)
                continue
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
        async with trio.open_nursery() as nursery:
            if self._events is not None:
                nursery.start_soon(self._consume, self._events)
            nursery.start_soon(self._hand_out, nursery)
            task_status.started()
            await self._timeouts()
        raise AssertionError("unreachable")

    async def _hand_out(self, nursery: trio.Nursery) -> None:
        async for delivery in self._order_queue:
            nursery.start_soon(self._deliver, delivery)

    async def _consume(self, events: trio.MemoryReceiveChannel[HostEvent]) -> None:
        async with events:
            async for event in events:
                await self.handle(event)

    async def _timeouts(self) -> NoReturn:
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


def _placed_on(instance: Instance, delivering: str | None, host_id: str) -> bool:
    """Whether *host_id* may report about *instance*: it is placed there, or its order is on
    its way there (*delivering*; a READY can overtake our ASSIGNED write)."""
    if instance.host_id is not None:
        return instance.host_id == host_id
    return delivering == host_id
