"""The console's static files (CSS, its own JS, the vendored libraries), from the package.

Read once from the installed package (``importlib.resources``: an installed wheel serves
them, pyproject's package-data lists them), kept in memory with a gzip copy, served with a
content hash in the URL (``?v=``) so a browser may cache them for a year. Only files under
``static/`` with a known type are served; anything else is 404.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
from typing import Final

import attrs

__all__ = ["StaticFile", "StaticFiles"]

_TYPES: Final = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


@attrs.frozen
class StaticFile:
    content_type: str
    body: bytes = attrs.field(repr=False)
    gzipped: bytes = attrs.field(repr=False)
    version: str


class StaticFiles:
    """Every servable file under the package's ``static/``, by its relative path."""

    def __init__(self) -> None:
        root = importlib.resources.files(__package__).joinpath("static")
        self._files: dict[str, StaticFile] = {}
        pending = [(root, "")]
        while pending:
            folder, prefix = pending.pop()
            for entry in folder.iterdir():
                name = f"{prefix}{entry.name}"
                if entry.is_dir():
                    pending.append((entry, f"{name}/"))
                    continue
                suffix = "." + entry.name.rpartition(".")[2]
                if suffix not in _TYPES:
                    continue
                body = entry.read_bytes()
                self._files[name] = StaticFile(
                    content_type=_TYPES[suffix],
                    body=body,
                    gzipped=gzip.compress(body, compresslevel=9, mtime=0),
                    version=hashlib.sha256(body).hexdigest()[:12],
                )

    def __repr__(self) -> str:
        return f"<StaticFiles {len(self._files)}>"

    def get(self, name: str) -> StaticFile | None:
        return self._files.get(name)

    def url(self, name: str) -> str:
        found = self._files.get(name)
        if found is None:
            raise KeyError(f"no static file {name!r}")
        return f"/console/static/{name}?v={found.version}"
