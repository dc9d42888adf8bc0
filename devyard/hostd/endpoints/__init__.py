"""What the host serves on streams the edge opens: the per-instance endpoints.

`serve_streams` accepts every stream the edge opens on a host link, reads its open preamble
(docs/protocol.md 6) and hands it to the endpoint of its ``kind``: ``api`` (the device API,
`device_api`), ``device-stream`` (the browser stream, `browser`), ``adb`` (the device side of
ADB, `devyard.hostd.adb`) and ``http`` (a device TCP port, for the reverse proxy).
"""

from .dispatch import serve_streams

__all__ = ["serve_streams"]
