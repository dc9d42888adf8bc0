"""`SharedRegistry`: what the instances service uses of a `HostRegistry` whose capacity lives
in the shared store (several server replicas: ``cluster.hosts.ClusterHosts``,
docs/scale-out.md). With one, a slot is reserved atomically in the store instead of held in
this process's memory, and each state change is told to the other replicas (which call
`InstanceService.on_instance_changed`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["SharedRegistry"]


@runtime_checkable
class SharedRegistry(Protocol):
    replica_id: str  # this replica (the owner of the instances it creates)

    async def reserve(self, key: str, host_ids: Sequence[str]) -> str | None:
        """A slot for *key* on the first of *host_ids* with room (moving *key*'s slot if it
        has one); the host, or None when none has room."""
        ...

    async def rebind(self, old_key: str, new_key: str) -> bool:
        """The slot held under *old_key* belongs to *new_key*; False if there was none (a
        hold older than the cluster's bound is freed)."""
        ...

    async def release(self, key: str) -> None:
        """Idempotent."""
        ...

    async def reserved_on(self, key: str) -> str | None:
        """The host *key*'s slot is on (an instance's order goes there), or None."""
        ...

    async def instance_changed(self, instance_id: str, state: str) -> None: ...

    def ordered_at(self, instance_id: str) -> float | None:
        """When (trio time) this process sent the instance's start order on a host's link
        for another replica, or None."""
        ...
