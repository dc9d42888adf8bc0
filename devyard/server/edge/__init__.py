"""The edge: where host daemons (and later connectors) link to the server (docs/edge.md).

`open_edge` gives an `Edge`, which implements `devyard.server.hosts.HostRegistry` over the
live host links and is the ASGI app of the ``/v1/host_connections`` WebSocket route.
"""

from .links import DEFAULT_HOST_GRACE, Edge, open_edge
from .tokens import HOST_TOKENS_FILE, HostTokens, create_host_token

__all__ = [
    "DEFAULT_HOST_GRACE",
    "HOST_TOKENS_FILE",
    "Edge",
    "HostTokens",
    "create_host_token",
    "open_edge",
]
