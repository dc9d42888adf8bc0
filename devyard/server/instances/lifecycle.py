"""The instance lifecycle as a table (spec 3.1): every state change of an instance is one
entry here, whoever triggers it (the API, a host event, a timeout, a lost host).

    creating --Assigned--> assigned --Ready--> ready
        \\________________\\___________________\\--Terminate--> terminated

``terminated`` is final. The store applies a step as compare-and-set (`expected_for`): the
row must still be in a state the event may leave, so two triggers racing (a delete and a
timeout) resolve to one termination and the loser sees `IllegalTransition`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from ..store.base import InstanceState

__all__ = ["TRANSITIONS", "IllegalTransition", "LifecycleEvent", "expected_for", "next_state"]

S = InstanceState


class LifecycleEvent(enum.Enum):
    ASSIGNED = "assigned"  # a host accepted the order
    READY = "ready"  # the host reports the device booted
    TERMINATE = "terminate"  # delete, timeout, host lost or error


TRANSITIONS: Final[Mapping[tuple[InstanceState, LifecycleEvent], InstanceState]] = {
    (S.CREATING, LifecycleEvent.ASSIGNED): S.ASSIGNED,
    (S.ASSIGNED, LifecycleEvent.READY): S.READY,
    (S.CREATING, LifecycleEvent.TERMINATE): S.TERMINATED,
    (S.ASSIGNED, LifecycleEvent.TERMINATE): S.TERMINATED,
    (S.READY, LifecycleEvent.TERMINATE): S.TERMINATED,
}


class IllegalTransition(Exception):
    def __init__(self, state: InstanceState, event: LifecycleEvent) -> None:
        super().__init__(f"{event.value} is not allowed in state {state.value}")
        self.state = state
        self.event = event


def next_state(state: InstanceState, event: LifecycleEvent) -> InstanceState:
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(state, event) from None


def expected_for(event: LifecycleEvent) -> frozenset[InstanceState]:
    """The states ``event`` may leave: the store's compare-and-set condition."""
    return frozenset(state for state, ev in TRANSITIONS if ev is event)
