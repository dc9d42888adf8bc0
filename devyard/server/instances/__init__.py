"""Instances: lifecycle, timeouts and placement of devices, and the service that drives them.

The pure parts (`lifecycle`, `durations`, `placement`) know nothing of trio or the store;
`service.InstanceService` drives them over the store and the edge's `hosts.HostRegistry`.
docs/instances.md records the decisions.
"""

from .directory import StoreInstanceDirectory
from .durations import DurationTooLong, InvalidDuration, format_duration, parse_duration
from .lifecycle import IllegalTransition, LifecycleEvent, expected_for, next_state
from .placement import ClientLocation, NoCapacity, RegionInfo, UnknownPlacement
from .requests import NewInstance
from .service import EmptyRegistry, InstanceService

__all__ = [
    "ClientLocation",
    "DurationTooLong",
    "EmptyRegistry",
    "IllegalTransition",
    "InstanceService",
    "InvalidDuration",
    "LifecycleEvent",
    "NewInstance",
    "NoCapacity",
    "RegionInfo",
    "StoreInstanceDirectory",
    "UnknownPlacement",
    "expected_for",
    "format_duration",
    "next_state",
    "parse_duration",
]
