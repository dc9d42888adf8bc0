"""The web console (issue 22, docs/console.md): server-rendered pages under ``/console``,
served by the server's own app, reading and writing only through the public API in-process
as the browser's session (`inprocess`)."""

from __future__ import annotations

from .web import mount

__all__ = ["mount"]
