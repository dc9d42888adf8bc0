"""The link's wire constants, shared by both ends (docs/protocol.md sections 7 and 10).

A link is one mux session from a host daemon or a connector to the server's edge. Its
lifecycle, "dial, ``hello``, ``registered`` | ``error {permanent}``, control loop, reconnect
with backoff or exit for good", is the same for both kinds; the constants that both ends must
agree on live here, once.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CONNECTOR_PATH", "HELLO_TIMEOUT", "HOST_PATH", "PROTO"]

#: The control protocol's version, sent in ``hello`` and checked by the edge.
PROTO: Final = 1
#: The edge's routes for the two kinds of link (WebSocket or raw upgrade).
HOST_PATH: Final = "/v1/host_connections"
CONNECTOR_PATH: Final = "/v1/connector_connections"
#: How long either end waits for the other's ``hello`` / ``registered``.
HELLO_TIMEOUT: Final = 10.0
