"""`InstanceService`: creates, ends and watches instances, and consumes what hosts report.

Theory of operation. The store row is the truth about an instance; every change goes through
the lifecycle table (`lifecycle.py`) as a compare-and-set on the row, so a delete racing a
timeout or a host event ends the instance exactly once. What an instance needs while it lives
is in the database too (`store.instance_runs`, written in the create transaction): its
timeout deadlines, its owner (the replica that created it) and its order. So any server
replica can end it on time, adopt it when its owner died mid-create, or hand its order to a
host linked elsewhere (docs/scale-out.md); one process on SQLite runs the same code. What
lives only in memory is what a restart may lose without harm: the ``trio.Event``s that wake
``wait_ready`` callers early (they also reread the row), and this replica's deliveries and
capacity holds.

Creation never leaves an instance stuck in ``creating``: placement fails *before* a row is
written when no host has room (`NoCapacity`; placement and the hold on the chosen host's slot
are one step, with no await between, so concurrent creates never share a free slot), and an
order that no host accepts terminates the row with ``Error``. Ending an instance writes the
row first (state), then tells the host under a bounded, shielded grace.

`run`, owned by the server's nursery, hands orders to hosts, consumes the `HostEvent`s the
edge publishes on a bounded channel (`reports.HostReports`; the service never is the edge's
callee) and runs the `sweeper.Sweeper` (timeouts, orphans). A store error while handling one
event or one timeout is logged and contained: the next one is handled. Inactivity counts from
``ready`` and from the last client traffic (the edge's gateway writes it to the shared
`Activity`); the hard timeout counts from creation.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Final, NoReturn

import attrs
import trio

from ..hosts import (
    Activity,
    HostEvent,
    HostInfo,
    HostRegistry,
    HostUnavailableError,
    InstanceOrder,
)
from ..store import errors as store_errors
from ..store import tokens
from ..store.base import Instance, InstanceState, Organization, Platform, Store, TerminationReason
from ..store.cluster import HOLD_PREFIX
from ..store.instance_runs import InstanceRunStore, Orphan, Owner
from .durations import parse_duration
from .lifecycle import IllegalTransition, LifecycleEvent, expected_for, next_state
from .placement import NoCapacity, Placement, RegionInfo, place, preferred_region
from .reports import NOT_ON_HOST_AFTER_RESTART, STOP_GRACE, HostReports
from .requests import (
    NewInstance,
    check_platform_fields,
    normalise_spec,
    os_version,
    placement_request,
)
from .shared import SharedRegistry
from .sweeper import POLL_S, Sweeper, WallClock
from .tunnel_check import TunnelStatusSource, tunnel_for

log = logging.getLogger(__name__)

__all__ = [
    "NOT_ON_HOST_AFTER_RESTART",
    "EmptyRegistry",
    "InstanceService",
    "NewInstance",
    "TunnelStatusSource",
]

INSTANCE_TOKEN_PREFIX: Final = "dyi"  # noqa: S105 - a prefix, not a secret
STREAM_TOKEN_PREFIX: Final = "dys"  # noqa: S105 - a prefix, not a secret
ORDER_BUFFER: Final = 64  # orders waiting for `run` to hand them out (create waits beyond)
ORDER_LOST_IN_RESTART: Final = "the server restarted before a host took the order"
ORDER_LOST_WITH_REPLICA: Final = (
    "the server replica that created it stopped before a host took the order"
)
ORG_DELETED: Final = "the organization was deleted"
NO_HOST_ACCEPTED: Final = "no host accepted the instance"


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
    failure: str = NO_HOST_ACCEPTED  # the errorMessage when no host takes it


class InstanceService(HostReports):
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
        sweep_s: float = POLL_S,
    ) -> None:
        """*registry* takes orders to hosts; *events* is what the hosts report (none: a
        control plane without an edge); *tunnels* says whether a tunnel is held (none: every
        tunnel is offline); *activity* is where the edge records client traffic; *sweep_s*
        bounds how long the sweeper waits between passes (and ``wait_ready`` between reads)."""
        if not isinstance(store, InstanceRunStore):
            raise TypeError("the instances service needs a store with instance runs")
        self._store = store
        self._runs: InstanceRunStore = store
        self._registry = registry
        self._shared = registry if isinstance(registry, SharedRegistry) else None
        # this replica, and this run of its process: the owner of what it creates
        replica_id = self._shared.replica_id if self._shared is not None else "local"
        self.owner = Owner(replica_id, secrets.token_hex(8))
        self._events = events
        self._tunnels = tunnels
        self._activity = activity if activity is not None else Activity(clock)
        self._regions = tuple(regions)
        self._home = home_region
        self._clock = clock
        self._wall = WallClock(clock)
        self._poll_s = sweep_s
        self._ready: dict[str, trio.Event] = {}  # wakes `wait_ready` (it rereads the row too)
        # Orders go to hosts from `run`'s nursery (create answers at once, with creating).
        self._orders, self._order_queue = trio.open_memory_channel[_Delivery](ORDER_BUFFER)
        self._creating: set[str] = set()  # instances whose order this replica is delivering
        self._delivering: dict[str, str] = {}  # instance id -> host its order is on its way to
        # Capacity held for creates and orders the registry does not count yet: reservation
        # (or instance) id -> host. Taken in the same step as placement (no await between), so
        # concurrent creates never see the same free slot; dropped in the same step as the
        # registry starts counting the order (`start_instance` counts it before it awaits).
        self._reserved: dict[str, str] = {}
        self._reservations = 0
        self._ordered_at: dict[str, float] = {}  # instance id -> when its host took the order
        self._sweeper = Sweeper(
            self._runs,
            self._activity,
            owner=self.owner,
            wall=self._wall,
            end=self._end,
            adopt=self._adopt,
            poll_s=sweep_s,
        )

    def __repr__(self) -> str:
        return f"<InstanceService {self.owner.replica_id}>"

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
        hard = parse_duration("spec.hardTimeout", spec["hardTimeout"])
        inactivity = parse_duration("spec.inactivityTimeout", spec["inactivityTimeout"])
        tunnel = await tunnel_for(
            self._store, self._tunnels, organization.id, new.platform, spec.get("tunnel")
        )
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
        order_fields: dict[str, Any] = {
            "organization_id": organization.id,
            "platform": new.platform.value,
            "model": spec.get("model"),
            "os_version": os_version(spec),
            "spec": spec,
            "initial_assets": list(new.initial_assets),
            "tunnel": tunnel,
        }
        bound = False
        try:
            if reuse:
                found = await self._find_live(organization.id, new, placement.region)
                if found is not None:
                    return found
            instance = await self._store.create_instance(
                org_id=organization.id,
                platform=new.platform,
                region=placement.region,
                labels=new.labels,
                spec=spec,
                display_name=new.display_name,
                token=tokens.new_secret(INSTANCE_TOKEN_PREFIX).plaintext,
                stream_token=tokens.new_secret(STREAM_TOKEN_PREFIX).plaintext,
                max_live=max_live,
                created_by=new.created_by,
                with_rows=self._runs.rows_for_create(
                    owner=self.owner,
                    inactivity_s=inactivity,
                    hard_at=None if hard == 0 else self._wall.now() + timedelta(seconds=hard),
                    order=order_fields,
                ),
            )
            if self._shared is None:
                self._reserved[instance.id] = self._reserved.pop(hold)
            else:
                first = await self._bind(hold, instance, placement, first)
            bound = True
        finally:
            await self._unhold(hold, bound=bound)
        order = InstanceOrder.from_fields(instance.id, order_fields)
        self._ready[instance.id] = trio.Event()
        self._creating.add(instance.id)
        self._sweeper.wake()  # its hard deadline may be the earliest
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

    async def _bind(self, hold: str, instance: Instance, placement: Placement, host: str) -> str:
        """The shared slot held under *hold* (on *host*) becomes *instance*'s; the host."""
        assert self._shared is not None
        if await self._shared.rebind(hold, instance.id):
            return host
        # the hold outlived HOLD_S (this create was that slow) and was freed: book again
        log.warning("the slot held for %s was freed meanwhile; booking again", instance.id)
        again = await self._shared.reserve(instance.id, [h.id for h in placement.hosts])
        if again is None:
            with trio.CancelScope(shield=True):
                await self._end(instance.id, TerminationReason.ERROR, "no host has room any more")
            raise NoCapacity(f"no host with room for a {instance.platform.value} instance now")
        return again

    async def _hold(self, placement: Placement, platform: Platform) -> tuple[str, str]:
        """Hold a slot for a create on the first of *placement*'s hosts with room: the hold's
        key and its host."""
        self._reservations += 1
        if self._shared is None:
            hold = f"reservation-{self._reservations}"
            self._reserved[hold] = placement.hosts[0].id  # no await since `place`: atomic
            return hold, placement.hosts[0].id
        # the shared store's reservation is the atomic step (other replicas race us)
        hold = f"{HOLD_PREFIX}{secrets.token_hex(8)}"
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
                if instance_id not in self._creating:  # ended meanwhile (a delete)
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
            await self._end(instance_id, TerminationReason.ERROR, delivery.failure)
        except store_errors.StoreError:
            log.exception("could not record where %s went", instance_id)
        finally:
            self._unpend(instance_id)

    def _unpend(self, instance_id: str) -> None:
        self._creating.discard(instance_id)
        self._delivering.pop(instance_id, None)
        self._reserved.pop(instance_id, None)

    def _hosts(self) -> list[HostInfo]:
        """Connected hosts, counting the capacity held for creates and queued orders as
        running (placement)."""
        on_the_way = Counter(self._reserved.values())
        return [
            attrs.evolve(h, running=h.running + on_the_way[h.id]) for h in self._registry.hosts()
        ]

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
        """Returns once the instance left ``creating``/``assigned`` (or is unknown). Works on
        any replica: it follows the row, woken early by this replica's own change or another
        replica's on the cluster bus (`on_instance_changed`). Bound it with the caller's
        cancel scope."""
        while True:
            event = self._ready.setdefault(instance_id, trio.Event())  # before the read
            try:
                instance = await self._store.get_instance(instance_id)
            except store_errors.NotFound:
                return
            if instance.state not in (InstanceState.CREATING, InstanceState.ASSIGNED):
                return
            with trio.move_on_after(self._poll_s):
                await event.wait()

    async def stored_order(self, instance_id: str) -> InstanceOrder | None:
        """The order of a live instance as its create stored it (None: none, or ended)."""
        fields = await self._runs.stored_order(instance_id)
        return None if fields is None else InstanceOrder.from_fields(instance_id, fields)

    # -- orphans ---------------------------------------------------------------------------
    async def _adopt(self, orphan: Orphan) -> None:
        """This replica won *orphan* (its owner is gone): one ``assigned`` is its host's
        already (its ready or failure reaches whichever replica holds the host; its loss
        ends it); one ``creating`` gets its stored order delivered to the host its slot is
        reserved on, or ends with ``Error`` saying why; one ``terminated`` (its end stopped
        half way) gets the rest of its end: the stop to its host, its slot, its rows."""
        if orphan.state == InstanceState.TERMINATED.value:  # an end its replica left unfinished
            instance = await self._store.get_instance(orphan.instance_id)
            reason = instance.termination_reason or TerminationReason.ERROR
            await self._end(orphan.instance_id, reason, instance.error_message)
            return
        if orphan.state != InstanceState.CREATING.value:
            await trio.lowlevel.checkpoint()
            return
        message = ORDER_LOST_IN_RESTART if self._shared is None else ORDER_LOST_WITH_REPLICA
        host_id = (
            None if self._shared is None else await self._shared.reserved_on(orphan.instance_id)
        )
        order = await self.stored_order(orphan.instance_id)
        if host_id is None or order is None:
            await self._end(orphan.instance_id, TerminationReason.ERROR, message)
            return
        self._creating.add(orphan.instance_id)
        self._delivering[orphan.instance_id] = host_id
        await self._orders.send(_Delivery(order, (host_id,), failure=message))

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
        # The rest of the end, every step idempotent. Its run rows go last: an end whose
        # replica died on the way leaves them, and a sweep (any replica's) finishes it.
        if instance.host_id is not None and reason is not TerminationReason.HOST_LOST:
            with trio.move_on_after(STOP_GRACE, shield=True):
                await self._registry.stop_instance(instance.host_id, instance_id)
        if self._shared is not None:
            await self._tell_shared(self._shared.release(instance_id))
            await self._tell_shared(self._shared.instance_changed(instance_id, instance.state))
        await self._tell_shared(self._runs.forget_run(instance_id))
        log.info("instance %s terminated: %s", instance_id, instance.termination_reason)
        return instance

    def _forget(self, instance_id: str) -> None:
        self._creating.discard(instance_id)
        self._ordered_at.pop(instance_id, None)
        self._activity.forget(instance_id)
        self._sweeper.forget(instance_id)
        self._wake_waiters(instance_id)

    def _wake_waiters(self, instance_id: str) -> None:
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
        if instance.state is InstanceState.READY:  # this replica made it ready
            await self._runs.start_idle([instance_id], self._wall.now())
            self._sweeper.wake()
            self._wake_waiters(instance_id)
        if self._shared is not None:
            await self._tell_shared(self._shared.instance_changed(instance_id, instance.state))
        return instance

    async def _tell_shared(self, call: Awaitable[None]) -> None:
        """A write to the shared state after the row changed: a failure is logged (the other
        replicas resynchronize from the store; a reservation goes with its host; a timer
        left behind finds the instance ended)."""
        try:
            await call
        except Exception:  # the database may be away; the row is already right
            log.exception("could not tell the other replicas")

    async def on_instance_changed(self, instance_id: str, state: str) -> None:
        """Another replica changed *instance_id* (cluster mode): a READY wakes `wait_ready`
        here (and the sweeper: its deadlines moved); an end forgets it here."""
        await trio.lowlevel.checkpoint()
        if state == InstanceState.READY.value:
            self._sweeper.wake()
            self._wake_waiters(instance_id)
        elif state == InstanceState.TERMINATED.value:
            self._forget(instance_id)

    def touch(self, instance_id: str) -> None:
        """Client traffic to the instance: its inactivity period starts again."""
        self._activity.touch(instance_id)

    # -- running ---------------------------------------------------------------------------
    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Hands out orders, handles what hosts report, ends instances whose timeouts are due
        and adopts orphans (`Sweeper`); runs until cancelled."""
        live = await self._store.list_live_instances()
        backfill = []  # live instances made before their timers were rows: fresh deadlines
        now = self._wall.now()
        for instance in live:
            hard = parse_duration("spec.hardTimeout", instance.spec.get("hardTimeout", "0"))
            inactivity = parse_duration(
                "spec.inactivityTimeout", instance.spec.get("inactivityTimeout", "0")
            )
            backfill.append(
                (instance.id, inactivity, None if hard == 0 else now + timedelta(seconds=hard))
            )
        # without an owner ("" is no replica) they are orphans: adopted below like any other
        await self._runs.backfill_runs(Owner("", ""), backfill)
        ready = [i.id for i in live if i.state is InstanceState.READY]
        await self._runs.start_idle(ready, now)  # (those whose period had not started)
        if self._shared is None:  # one server: its downtime does not count as inactivity
            await self._runs.record_activity(dict.fromkeys(ready, now))
        async with trio.open_nursery() as nursery:
            if self._events is not None:
                nursery.start_soon(self._consume, self._events)
            nursery.start_soon(self._hand_out, nursery)
            await self._sweeper.sweep()  # orphans of an earlier run go before anything new
            task_status.started()
            await self._sweeper.run()
        raise AssertionError("unreachable")

    async def _hand_out(self, nursery: trio.Nursery) -> None:
        async for delivery in self._order_queue:
            nursery.start_soon(self._deliver, delivery)

    async def _consume(self, events: trio.MemoryReceiveChannel[HostEvent]) -> None:
        async with events:
            async for event in events:
                await self.handle(event)

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
