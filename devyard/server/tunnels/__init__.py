"""Persistent tunnels: the service behind ``/v1/tunnels`` and its seam to the edge.

`TunnelService` holds the rules (names, selectors, token lifetime, hashed tokens) over the
store; the edge's connector links implement `TunnelHub` and hear about every change that
concerns a connected connector (docs/tunnels.md).
"""

from .service import (
    DEFAULT_EXPIRY_MONTHS,
    EXPIRY_WARNING,
    TOKEN_PREFIX,
    ConnectorInfo,
    EndReason,
    InvalidTunnelField,
    StoreTunnelDirectory,
    TokenExpired,
    TokenInvalid,
    TunnelConnections,
    TunnelHub,
    TunnelService,
    TunnelStatus,
    add_months,
    parse_tunnel_token,
)

__all__ = [
    "DEFAULT_EXPIRY_MONTHS",
    "EXPIRY_WARNING",
    "TOKEN_PREFIX",
    "ConnectorInfo",
    "EndReason",
    "InvalidTunnelField",
    "StoreTunnelDirectory",
    "TokenExpired",
    "TokenInvalid",
    "TunnelConnections",
    "TunnelHub",
    "TunnelService",
    "TunnelStatus",
    "add_months",
    "parse_tunnel_token",
]
