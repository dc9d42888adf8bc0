"""The tunnel connector customers run in their network (``devyard connector``).

It dials the server outbound, holds one tunnel as its active or standby connector, and dials
the destinations the tunnel's selectors admit for the devices on the other side. It imports
only `devyard.core` (and `devyard.client` for ``connector quick``): see docs/tunnels.md.
"""

from ._errors import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PROTOCOL,
    EXIT_REPLACED,
    EXIT_TOKEN_EXPIRED,
    EXIT_TOKEN_INVALID,
    EXIT_TOKEN_REVOKED,
    EXIT_TOKEN_ROTATED,
    EXIT_TUNNEL_DELETED,
    EXIT_USAGE,
    LinkLostError,
    PermanentError,
)
from .link import CONNECTOR_CONNECTIONS_PATH, ConnectorConfig, serve_connector
from .metrics import Metrics

__all__ = [
    "CONNECTOR_CONNECTIONS_PATH",
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
    "ConnectorConfig",
    "LinkLostError",
    "Metrics",
    "PermanentError",
    "serve_connector",
]
