"""A secret key kept in a file of the data dir: made on first use, read after.

The file is created exclusively (``O_EXCL``) with mode 0600 in a 0700 directory, so two
processes starting at once agree on one key and no other local user can read it. It holds the
key hex-encoded on one line. Blocking: call it at start-up or in a worker thread.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["load_or_create_key"]


def load_or_create_key(path: Path, size: int) -> bytes:
    """The *size*-byte key in *path*, created when missing; ValueError if it holds another."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = bytes.fromhex(path.read_text().strip())
        if len(key) != size:
            raise ValueError(f"{path}: expected {size} hex-encoded bytes") from None
        return key
    key = secrets.token_bytes(size)
    with os.fdopen(fd, "w") as file:
        file.write(key.hex() + "\n")
    return key
