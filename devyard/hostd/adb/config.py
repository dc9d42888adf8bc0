"""AdbConfig: what the device side of ADB advertises, and its safety valves."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from .packets import MAX_PAYLOAD

__all__ = ["DEFAULT_CONFIG", "DEFAULT_FEATURES", "AdbConfig"]

#: What an Android 10 device advertises, minus what we do not implement. `adb install` picks its
#: route from these: abb_exec -> `abb_exec:package install`, else cmd -> `exec:cmd package
#: install`, else push + `pm install` (docs/adb.md, "Install routes"). remount_shell makes
#: `adb remount` run `remount` through shell v2, the only way it can fail with a status.
DEFAULT_FEATURES: Final = (
    "shell_v2",
    "cmd",
    "stat_v2",
    "ls_v2",
    "fixed_push_mkdir",
    "fixed_push_symlink_timestamp",
    "abb_exec",
    "remount_shell",
)


def _features(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):  # an Iterable[str] too, but of single letters
        raise TypeError(f"features is a list of feature names, not one string: {value!r}")
    return tuple(value)


def _check_features(
    _: object, __: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]
) -> None:
    for feature in value:
        if not feature or any(c in feature for c in ",;:\0"):
            raise ValueError(f"bad feature name {feature!r}")


@attrs.frozen(kw_only=True)
class AdbConfig:
    features: tuple[str, ...] = attrs.field(
        default=DEFAULT_FEATURES, converter=_features, validator=_check_features
    )
    #: The largest packet payload we accept and offer in CNXN (the host offers 1 MiB).
    max_payload: int = attrs.field(default=MAX_PAYLOAD, validator=attrs.validators.ge(4096))
    #: Streams open at once on one connection; an OPEN past it is refused.
    max_streams: int = attrs.field(default=256, validator=attrs.validators.ge(1))
    #: Bytes of WRTE payload queued for the transport before writers park.
    max_outbound: int = attrs.field(default=4 * MAX_PAYLOAD, validator=attrs.validators.ge(1))
    #: Bytes of the host's WRTE payload one stream may hold unconsumed. adb sends one WRTE at
    #: a time; a bridge that acknowledges early (core/adbwire.py) sends several: more than
    #: this is a protocol error.
    max_inbound: int = attrs.field(default=16 * MAX_PAYLOAD, validator=attrs.validators.ge(1))
    #: Seconds the connection may take to flush its last packets when it ends.
    close_grace: float = attrs.field(default=2.0, validator=attrs.validators.ge(0))

    def has(self, feature: str) -> bool:
        return feature in self.features


DEFAULT_CONFIG: Final = AdbConfig()
