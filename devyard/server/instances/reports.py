"""`HostReports`: what the instances service does with what hosts report (the edge's
`HostEvent`s): a host's registration reconciled with the store, an instance's ready or end,
a host's loss. A mixin of `InstanceService` (service.py), which provides the state it reads
and the two writes it makes (`_advance`, `_end`)."""

from __future__ import annotations

import logging
from typing import Final

import trio

from ..hosts import (
    HostEvent,
    HostLost,
    HostRegistered,
    HostRegistry,
    HostUnavailableError,
    InstanceEvent,
    InstanceOrder,
    InstancePhase,
    InstanceReported,
)
from ..store import errors as store_errors
from ..store.base import Instance, InstanceState, Store, TerminationReason
from .lifecycle import LifecycleEvent
from .shared import SharedRegistry

log = logging.getLogger(__name__)

__all__ = ["NOT_ON_HOST_AFTER_RESTART", "STOP_GRACE", "HostReports"]

STOP_GRACE: Final = 10.0  # seconds a host gets to take a stop order
#: Seconds a repeated order may take to reach a host that has just registered here (a send on
#: its link; well under any order timeout, so it is never "taken back" with a stop)
NUDGE_GRACE: Final = 2.0
#: errorMessage of an instance its host no longer runs when it links again
NOT_ON_HOST_AFTER_RESTART: Final = "the host restarted and no longer runs this device"


class HostReports:
    _store: Store
    _registry: HostRegistry
    _shared: SharedRegistry | None
    _delivering: dict[str, str]  # instance id -> host its order is on its way to
    _ordered_at: dict[str, float]  # instance id -> when its host took the order (trio time)

    async def _advance(
        self, instance_id: str, event: LifecycleEvent, *, host_id: str | None = None
    ) -> Instance:
        raise NotImplementedError

    async def _end(
        self, instance_id: str, reason: TerminationReason, error_message: str | None
    ) -> Instance:
        raise NotImplementedError

    async def stored_order(self, instance_id: str) -> InstanceOrder | None:
        raise NotImplementedError

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
        ready there but the host does not run ends (HostLost, with the reason); one the host
        runs but the store holds ended (or never heard of) is stopped on the host; one the
        store holds not ready yet gets its order again, whether the host runs it (a host
        that has it ready answers with ``ready`` again: the first may have died with the
        replica the host was linked to) or not (the order died on the way: a replica that
        sent it on its link was killed before the bytes left). Orders the host took after it
        registered are not in its list and are left alone."""
        if event.instances is None:  # an older host that does not say: nothing to compare
            await trio.lowlevel.checkpoint()
            return
        for instance in await self._store.list_live_instances(host_id=event.host_id):
            ordered = self._ordered_at.get(instance.id)
            if ordered is None and self._shared is not None:  # sent by another replica
                ordered = self._shared.ordered_at(instance.id)
            if instance.id in event.instances or (ordered is not None and ordered >= event.at):
                continue
            if instance.state is InstanceState.ASSIGNED:  # the order died on the way
                log.warning("host %s took %s but does not run it: ordering it again",
                            event.host_id, instance.id)  # fmt: skip
                await self._ask_again(event.host_id, instance.id)
                continue
            log.warning("host %s no longer runs %s", event.host_id, instance.id)
            await self._end(instance.id, TerminationReason.HOST_LOST, NOT_ON_HOST_AFTER_RESTART)
        for instance_id in sorted(event.instances):
            try:
                state = (await self._store.get_instance(instance_id)).state
            except store_errors.NotFound:
                state = InstanceState.TERMINATED
            if state is InstanceState.TERMINATED:
                log.warning(
                    "host %s runs %s, which has ended: stopping it", event.host_id, instance_id
                )
                with trio.move_on_after(STOP_GRACE):
                    await self._registry.stop_instance(event.host_id, instance_id)
            elif state is not InstanceState.READY:
                await self._ask_again(event.host_id, instance_id)

    async def _ask_again(self, host_id: str, instance_id: str) -> None:
        """The stored order of *instance_id* sent again to *host_id*, which has just
        registered here and runs it: a nudge, not a placement (no failure ends anything)."""
        order = await self.stored_order(instance_id)
        if order is None:
            return
        with trio.move_on_after(NUDGE_GRACE):
            try:
                await self._registry.start_instance(host_id, order)
            except HostUnavailableError as exc:  # its link went again: the next one asks
                log.info("host %s: could not ask again about %s: %s", host_id, instance_id, exc)

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
            await self._advance(instance.id, LifecycleEvent.READY)
        elif instance.live:
            message = event.error_message or f"the instance stopped on host {host_id}"
            await self._end(instance.id, TerminationReason.ERROR, message)

    async def on_host_lost(self, host_id: str) -> None:
        for instance in await self._store.list_live_instances(host_id=host_id):
            await self._end(instance.id, TerminationReason.HOST_LOST, f"host {host_id} is gone")


def _placed_on(instance: Instance, delivering: str | None, host_id: str) -> bool:
    """Whether *host_id* may report about *instance*: it is placed there, or its order is on
    its way there (*delivering*; a READY can overtake our ASSIGNED write)."""
    if instance.host_id is not None:
        return instance.host_id == host_id
    return delivering == host_id
