"""The client side of TLS for links: the system's trust store, plus a CA file when given.

Hosts and connectors verify the server's certificate always (there is no switch to turn that
off). ``--ca-file`` adds one CA (``devyard up --tls``'s, or a private PKI's) to the system
store rather than replacing it, so a deployment may move between a private and a public CA
without reconfiguring its hosts.
"""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["client_context"]


def client_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """A verifying client context: TLS 1.2+, the system store, and *ca_file* if given
    (OSError or ssl.SSLError when it cannot be read)."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return context
