"""Which Gradle runs a ``gradlebuild``: the project's own wrapper (``gradlew``) when its
distribution is already in the organization's Gradle user home, else Debian's ``gradle``.

The wrapper downloads its distribution on first use, and builds have no network: a wrapper
whose distribution is not cached would fail, so hostd only picks it when Gradle's own marker
of a finished install is there: ``<gradle home>/wrapper/dists/<name>/<hash>/<name>.zip.ok``,
*name* the distribution file's name without ``.zip`` and *hash* Gradle's
``PathAssembler.getHash``: the MD5 of the ``distributionUrl``, as a positive number in base 36.
(A customer fills the cache by running the wrapper once with network elsewhere and syncing
nothing: the Gradle home lives on the host; here it is filled by an operator.)

The workspace is the build user's: every path is opened without following links
(``O_NOFOLLOW`` on each step), and only a ``distributionUrl`` is read from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import stat
from pathlib import Path
from typing import Final

__all__ = ["distribution_hash", "wrapper_distribution"]

_PROPERTIES: Final = ("gradle", "wrapper", "gradle-wrapper.properties")
_MAX_PROPERTIES: Final = 64 * 1024


def distribution_hash(url: str) -> str:
    """Gradle's ``PathAssembler.getHash(uri)``: MD5, as a positive base-36 number."""
    number = int.from_bytes(hashlib.md5(url.encode()).digest(), "big")  # noqa: S324 - Gradle's
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out or "0"


def _read_nofollow(root: Path, parts: tuple[str, ...]) -> bytes | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        fd = os.open(root, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for name in parts[:-1]:
            step = os.open(name, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = step
        leaf = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    with os.fdopen(leaf, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read(_MAX_PROPERTIES)


def _properties(text: str) -> dict[str, str]:
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip().replace("\\:", ":").replace("\\=", "=")
    return values


def wrapper_distribution(workspace: Path, project: str, gradle_home: Path) -> str | None:
    """The wrapper's distribution URL when *project* (relative to the workspace, ``""`` for
    its root) has ``gradlew`` and a wrapper whose distribution is cached in *gradle_home*;
    None otherwise (blocking, a few small reads)."""
    parts = tuple(p for p in project.split("/") if p)
    if _read_nofollow(workspace, (*parts, "gradlew")) is None:
        return None
    raw = _read_nofollow(workspace, (*parts, *_PROPERTIES))
    if raw is None:
        return None
    values = _properties(raw.decode("utf-8", "replace"))
    url = values.get("distributionUrl", "")
    if values.get("distributionBase", "GRADLE_USER_HOME") != "GRADLE_USER_HOME":
        return None
    if values.get("distributionPath", "wrapper/dists") != "wrapper/dists":
        return None
    name = posixpath.basename(url.split("?", 1)[0])
    if not url or not name.endswith(".zip") or name in (".zip", "..zip"):
        return None
    base = name.removesuffix(".zip")
    marker = gradle_home / "wrapper" / "dists" / base / distribution_hash(url) / f"{name}.ok"
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(marker).st_mode):
            return url
    return None
