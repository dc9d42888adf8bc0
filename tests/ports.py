"""Loopback ports for tests that name a port before anything listens on it (``adb -P``,
``adb forward``, "a port nobody listens on")."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback TCP port that is free now and lies below the kernel's ephemeral range.

    Below that range no outgoing connection takes the port as its source port before our
    server binds it, and a client that dials the port before anything listens there cannot
    connect to itself. (TCP self-connect: CI once saw `adb` read its own "000chost:version"
    back as the server's status, when the port picked for its server was ephemeral.)
    """
    low = _ephemeral_low()
    first = 10_000 if low > 11_000 else 1024
    for _ in range(1000):
        port = random.randrange(first, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {first}-{low - 1}")
