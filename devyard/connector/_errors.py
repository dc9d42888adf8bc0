"""Why a connector stops for good, and the exit code each reason has (docs/tunnels.md).

    Exception
     ├── core.link.LinkRefused
     │    └── PermanentError  the server ended this connector; never retried
     │                        (``exit_code`` is the process's exit status)
     └── core.link.LinkLost   (LinkLostError) the link dropped or was refused for now:
                              reconnect with backoff

A permanent end arrives three ways: HTTP 401 on the upgrade (``{"code": "token-invalid" |
"token-expired"}``), an ``error`` control message with ``permanent: true``, or a GO_AWAY code
marked "do not retry" in docs/protocol.md 5.3. All three map to the same codes here.
"""

from __future__ import annotations

from typing import Final

from ..core import GoAwayCode
from ..core.link import LinkLost, LinkRefused

__all__ = [
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_PROTOCOL",
    "EXIT_REPLACED",
    "EXIT_TOKEN_EXPIRED",
    "EXIT_TOKEN_INVALID",
    "EXIT_TOKEN_REVOKED",
    "EXIT_TOKEN_ROTATED",
    "EXIT_TUNNEL_DELETED",
    "EXIT_USAGE",
    "EXIT_VERSION",
    "LinkLostError",
    "PermanentError",
    "permanent_for_code",
    "permanent_for_go_away",
]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_TOKEN_ROTATED: Final = 10
EXIT_TOKEN_EXPIRED: Final = 11
EXIT_TUNNEL_DELETED: Final = 12
EXIT_REPLACED: Final = 13
EXIT_TOKEN_INVALID: Final = 14
EXIT_TOKEN_REVOKED: Final = 15
EXIT_PROTOCOL: Final = 16
EXIT_VERSION: Final = 17  # this connector is older than the server takes (core/versions.py)

#: The exit status of each permanent end's code.
EXIT_CODES: Final = {
    "token-rotated": EXIT_TOKEN_ROTATED,
    "token-expired": EXIT_TOKEN_EXPIRED,
    "tunnel-deleted": EXIT_TUNNEL_DELETED,
    "replaced": EXIT_REPLACED,
    "token-invalid": EXIT_TOKEN_INVALID,
    "token-revoked": EXIT_TOKEN_REVOKED,
    "protocol-unsupported": EXIT_PROTOCOL,
    "version-unsupported": EXIT_VERSION,
}
_BY_GO_AWAY: Final = {
    GoAwayCode.TOKEN_ROTATED: "token-rotated",
    GoAwayCode.TOKEN_EXPIRED: "token-expired",
    GoAwayCode.TUNNEL_DELETED: "tunnel-deleted",
    GoAwayCode.REPLACED: "replaced",
    GoAwayCode.TOKEN_REVOKED: "token-revoked",
}

#: The link dropped or was refused for now; reconnect with backoff.
LinkLostError = LinkLost


class PermanentError(LinkRefused):
    """The server ended this connector for good; the process exits with ``exit_code``."""

    def __init__(self, code: str, message: str, exit_code: int) -> None:
        super().__init__(code, message, permanent=True)
        self.exit_code = exit_code


def permanent_for_code(code: str, message: str = "") -> PermanentError:
    return PermanentError(code, message, EXIT_CODES.get(code, EXIT_ERROR))


def permanent_for_go_away(code: int | None) -> PermanentError | None:
    """The permanent end a GO_AWAY code means, or None when reconnecting is right."""
    name = None if code is None else _BY_GO_AWAY.get(code)  # type: ignore[call-overload]
    return None if name is None else permanent_for_code(name, "GO_AWAY from the server")
