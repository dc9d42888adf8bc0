"""Two links to two different replicas, for host daemons and connectors (issue 23, "two
links", docs/scale-out.md and docs/protocol.md 7).

A server replica that advertises where clients reach it directly puts the replica set in
its ``registered`` (``replica``: the replica this link landed on; ``replicas``: ``[{id,
url}]``) and sends ``{"type": "replicas", ...}`` when the set changes. `LinkSlots` keeps
what every link of one client has learnt, and chooses where each of its two `run_link`
loops (the *slots*) dials next (`target`):

- a slot dials a replica of the set directly (its advertised URL), never the one the other
  slot is linked to or dialling, nor one that asked a link to move (``drain``); after a
  failure it tries the other candidates first;
- slot 0 dials the configured URL (the load balancer) while the set is unknown (a single
  server, an older server, or a cluster that advertises nothing), or when no other slot is
  linked and its last attempt failed (the set it knows may be stale);
- a slot with nowhere to go waits for a change: a new set, or the other slot's loss.

So with one server, or one replica, the client holds exactly one link as before; with two
or more it holds two, on two replicas; when one link dies the other keeps serving, and the
lost slot redials (with its backoff) another replica, or the same one when it comes back.
Two links of one client never land on one replica (the edge would take the second for the
first's replacement): the load balancer is dialled only while no other slot is linked or
dialling.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from .channel import ControlChannel
from .link import ServeRegistered, race
from .session import Session
from .transports import link_url

log = logging.getLogger(__name__)

__all__ = ["SLOTS", "LinkSlots", "Replica"]

#: links a client holds when the server names two replicas or more
SLOTS: Final = 2
_MAX_REPLICAS: Final = 64  # entries of a set this client keeps (a bound on what it trusts)


@attrs.frozen
class Replica:
    id: str
    url: str  # the replica's advertised base URL (http(s)://, ws(s)://, tcp://, tls://)


@attrs.define
class _Slot:
    state: str = "idle"  # idle | dialing | linked
    replica: str | None = None  # the replica linked to, or being dialled (None: the entry URL)
    failed: str | None = None  # the replica the last attempt failed on
    generation: int = 0


class LinkSlots:
    """The replica set as this client's links learnt it, and where each slot dials."""

    def __init__(self, entry_url: str, path: str, *, slots: int = SLOTS) -> None:
        """*entry_url*: the link URL of the configured server (the load balancer); *path*:
        the link route dialled on a replica's advertised URL."""
        self.entry_url = entry_url
        self._path = path
        self.replicas: tuple[Replica, ...] | None = None  # None: the server named none
        self._slots = [_Slot() for _ in range(slots)]
        self._avoid: set[str] = set()
        self._changed = trio.Event()

    def __repr__(self) -> str:
        linked = [s.replica for s in self._slots if s.state == "linked"]
        return f"LinkSlots(replicas={self.replica_ids()}, linked={linked})"

    @property
    def slots(self) -> int:
        return len(self._slots)

    def replica_ids(self) -> list[str]:
        return [] if self.replicas is None else [r.id for r in self.replicas]

    def linked(self) -> list[str | None]:
        """The replica each linked slot is on (None: a server that names no replica)."""
        return [s.replica for s in self._slots if s.state == "linked"]

    def links_wanted(self) -> int:
        """What a ``hello`` says in ``links``: how many links this client holds."""
        return min(self.slots, len(self.replicas or ())) or 1

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ---- what the links learn ------------------------------------------------------------

    def learn(self, message: Mapping[str, Any]) -> None:
        """The set from a ``registered`` or ``replicas`` message (ignored when absent or
        malformed: an older server names none)."""
        items = message.get("replicas")
        if not isinstance(items, list):
            return
        replicas = []
        for item in items[:_MAX_REPLICAS]:
            if isinstance(item, dict) and item.get("id") and item.get("url"):
                replicas.append(Replica(str(item["id"]), str(item["url"])))
        replicas.sort(key=lambda r: r.id)
        if tuple(replicas) != self.replicas:
            log.info("replica set: %s", ", ".join(r.id for r in replicas) or "none")
            self.replicas = tuple(replicas)
            self._avoid &= {r.id for r in replicas}
            self._notify()

    def serve(self, slot: int, body: ServeRegistered) -> ServeRegistered:
        """*body* for *slot*'s `run_link`: records the replica the link registered on and its
        end."""

        async def serve(
            session: Session, control: ControlChannel, registered: dict[str, Any]
        ) -> None:
            state = self._slots[slot]
            state.generation += 1
            generation = state.generation
            replica = registered.get("replica")
            state.state, state.replica, state.failed = "linked", None, None
            if isinstance(replica, str) and replica:
                state.replica = replica
            self.learn(registered)
            self._notify()
            try:
                await body(session, control, registered)
            finally:
                if state.generation == generation and state.state == "linked":
                    state.state, state.failed = "idle", state.replica
                    self._notify()

        return serve

    def moving(self, slot: int) -> None:
        """*slot*'s replica asked it to move (``drain``): the slot's next link goes to
        another replica (or waits); that replica is avoided while it stays in the set."""
        state = self._slots[slot]
        if state.replica is not None:
            self._avoid.add(state.replica)
        state.generation += 1
        state.state, state.failed = "idle", state.replica
        self._notify()

    # ---- where each slot dials -----------------------------------------------------------

    def target(self, slot: int, shutdown: trio.Event) -> Callable[[], Awaitable[str | None]]:
        """*slot*'s `run_link` target: the URL of its next attempt (waiting while it has
        nowhere to go), or None once *shutdown* is set."""

        async def target() -> str | None:
            state = self._slots[slot]
            if state.state == "dialing":  # the last attempt never registered
                state.failed = state.replica
            state.state = "idle"
            self._notify()
            while not shutdown.is_set():
                changed = self._changed
                url = self._choose(slot)
                if url is not None:
                    self._notify()
                    return url
                await race(changed.wait, shutdown.wait)
            return None

        return target

    def _choose(self, slot: int) -> str | None:
        state = self._slots[slot]
        others = [s for i, s in enumerate(self._slots) if i != slot and s.state != "idle"]
        taken = {s.replica for s in others}
        if self.replicas and None not in taken:  # every other link's replica is known
            candidates = [r for r in self.replicas if r.id not in taken and r.id not in self._avoid]
            if candidates and not (slot == 0 and not others and state.failed is not None):
                # spread the slots over the set; the replica that failed last goes last
                start = slot % len(candidates)
                ordered = candidates[start:] + candidates[:start]
                ordered.sort(key=lambda r: r.id == state.failed)
                state.state, state.replica = "dialing", ordered[0].id
                return link_url(ordered[0].url, self._path)
        if slot == 0 and not others:
            state.state, state.replica = "dialing", None
            return self.entry_url
        return None
