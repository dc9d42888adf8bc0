"""Which host daemons and connectors a server takes: the compatibility rule (docs/operations.md).

Two numbers gate a link. ``proto`` (`devyard.core.link.PROTO`) is the control protocol: a
different one is refused (``protocol-unsupported``). The release ``version`` a host daemon or
connector sends in its ``hello`` must be at least `MIN_PEER_VERSION`: older ones are refused
for good with ``version-unsupported`` and a message naming both versions, and exit with a code
of their own (connector 17, hostd 4) instead of retrying forever. A hello without a version,
or with one that does not parse, is let through: ``proto`` already guards the wire, and
development builds may carry any string. The server sends its own version in ``registered``
(``server_version``) and in ``/readyz``.

Pure: no I/O, no trio.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .. import __version__

__all__ = [
    "MIN_PEER_VERSION",
    "SERVER_VERSION",
    "VERSION_UNSUPPORTED",
    "parse_version",
    "peer_refusal",
]

#: The oldest host daemon / connector release this build's server links with.
MIN_PEER_VERSION: Final = "0.1.0"
#: The refusal's code (control ``error``), for clients to map to an exit code.
VERSION_UNSUPPORTED: Final = "version-unsupported"

#: What the edge adds to ``registered``.
SERVER_VERSION: Final = {"server_version": __version__}

_RELEASE: Final = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``1.2.3`` (also ``1.2``, ``1.2.3rc1``, ``1.2.3.dev4+local``) as a comparable triple."""
    match = _RELEASE.match(text.strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def peer_refusal(hello: Mapping[str, Any], minimum: str = MIN_PEER_VERSION) -> str | None:
    """Why a hello's peer is too old for this server (the refusal's message), else None."""
    sent = hello.get("version")
    theirs = parse_version(sent) if isinstance(sent, str) else None
    wanted = parse_version(minimum)
    if theirs is None or wanted is None or theirs >= wanted:
        return None
    role = str(hello.get("role") or "peer")
    return (
        f"this devyard {role} is version {sent}; the server ({__version__}) takes {minimum} "
        f"or newer: upgrade the {role}"
    )
