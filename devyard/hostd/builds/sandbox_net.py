"""The allowlist proxy of a build instance: the only way out of its sandboxes.

An HTTP proxy on a Unix socket (bound into each sandbox, where the keeper's relay serves it
on ``127.0.0.1:3128``): ``CONNECT host:port`` (HTTPS, any TCP) and absolute-form requests
(``GET http://host:port/path``, sent on with ``Connection: close``). A destination not in the
instance's ``spec.buildNetwork.allow`` answers 403 with a ``devyard:`` line that names the
entry it would need; an allowed one is still dialled only to addresses the host's network
policy allows (`netdial.open_checked`: a name is resolved and checked, then exactly the
checked address is dialled), so an allowlist cannot reach hostd's own services unless the
operator's ``--allow-network`` says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

from ...core.build_network import (
    AllowEntry,
    BuildNetworkError,
    allowed,
    allowlist_of,
    parse_allowlist,
)
from ..netdial import DialRefused, open_checked
from ..netpolicy import NetPolicy
from .sandbox import KEEPER

__all__ = ["build_network", "build_options", "serve_allowlist_proxy"]

log = logging.getLogger(__name__)

_MAX_HEAD: Final = 16 * 1024
_DIAL_S: Final = 15.0
_CHUNK: Final = 64 * 1024
_MAX_CONNECTIONS: Final = 256


def _answer(status: str, message: str) -> bytes:
    body = f"devyard: {message}\n".encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


def _split_authority(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = authority.partition(":")
    port = int(port_text) if port_text else default
    if not host or not 0 < port < 65536:
        raise ValueError(authority)
    return host, port


def _target(head: bytes) -> tuple[str, int, bytes | None]:
    """(host, port, the request to send on, or None for CONNECT) of a proxy request."""
    line, _, rest = head.partition(b"\r\n")
    method, target, version = line.decode("latin-1").split(" ")
    if method == "CONNECT":
        host, port = _split_authority(target, 443)
        return host, port, None
    if not target.startswith("http://"):
        raise ValueError(target)
    authority, slash, path = target.removeprefix("http://").partition("/")
    host, port = _split_authority(authority, 80)
    headers = [
        h
        for h in rest.split(b"\r\n")
        if h and h.split(b":", 1)[0].strip().lower() not in (b"connection", b"proxy-connection")
    ]
    request = f"{method} {slash or '/'}{path} {version}\r\n".encode()
    return host, port, request + b"\r\n".join([*headers, b"Connection: close"]) + b"\r\n\r\n"


async def _splice(source: trio.SocketStream, dest: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        while data := await source.receive_some(_CHUNK):
            await dest.send_all(data)
        await dest.send_eof()


async def _serve_one(
    client: trio.SocketStream, entries: tuple[AllowEntry, ...], policy: Callable[[], NetPolicy]
) -> None:
    async with client:
        head = b""
        with trio.move_on_after(_DIAL_S):
            while b"\r\n\r\n" not in head and len(head) < _MAX_HEAD:
                data = await client.receive_some(_CHUNK)
                if not data:
                    return
                head += data
        request_head, sep, extra = head.partition(b"\r\n\r\n")
        try:
            if not sep:
                raise ValueError("no request head")
            host, port, request = _target(request_head + b"\r\n")
        except (ValueError, UnicodeDecodeError):
            await client.send_all(_answer("400 Bad Request", "not a proxy request"))
            return
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if not allowed(entries, host, port):
            message = f"{shown} is not in this instance's spec.buildNetwork.allow"
            log.info("build proxy: refused %s", shown)
            await client.send_all(_answer("403 Forbidden", message))
            return
        try:
            upstream = await open_checked(host, port, policy(), limit_s=_DIAL_S)
        except DialRefused as exc:
            why = f"{shown} is allowed but could not be reached ({exc.reason.value})"
            await client.send_all(_answer("502 Bad Gateway", why))
            return
        async with upstream:
            if request is None:
                await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                await upstream.send_all(request)
            if extra:
                await upstream.send_all(extra)
            async with trio.open_nursery() as both:
                both.start_soon(_splice, client, upstream)
                both.start_soon(_splice, upstream, client)


def _prepare(path: Path) -> None:
    """*path*'s directory with the relay in it, and no stale socket (blocking)."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o755)  # noqa: S103 - the build user's way in, whatever the umask
    relay = path.parent / KEEPER.name  # the sandbox binds this directory: the relay runs it
    shutil.copyfile(KEEPER, relay)
    os.chmod(relay, 0o644)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


async def serve_allowlist_proxy(
    path: Path,
    entries: tuple[AllowEntry, ...],
    policy: Callable[[], NetPolicy],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the proxy on the Unix socket *path* (made 0666: the build user connects) until
    cancelled; *path*'s directory is the sandbox's ``/run/devyard`` (only the socket and the
    relay in it). *policy*: the host's network policy for the instance, asked per connection."""
    await trio.to_thread.run_sync(_prepare, path)
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    # through the directory's descriptor: an instance's path can be longer than AF_UNIX takes
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        await listener.bind(f"/proc/self/fd/{directory}/{path.name}")
    finally:
        os.close(directory)
    os.chmod(path, 0o666)  # noqa: S103 - the socket's directory is the instance's, 0700 above
    listener.listen(64)
    limit = trio.CapacityLimiter(_MAX_CONNECTIONS)

    async def one(sock: trio.socket.SocketType) -> None:
        async with limit:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await _serve_one(trio.SocketStream(sock), entries, policy)

    with listener:
        task_status.started()
        async with trio.open_nursery() as nursery:
            while True:
                sock, _ = await listener.accept()
                nursery.start_soon(one, sock)


def build_options(order_spec: object) -> dict[str, Any]:
    """The `DeviceSpec` fields of an order's instance spec that builds read: the allowlist
    (``build_network``, as its entries' text) and the iOS Xcode sandbox (``xcode_sandbox``).
    The server checked both; a malformed one here means no network and no sandbox."""
    if not isinstance(order_spec, dict):
        return {}
    try:
        entries = tuple(str(e) for e in allowlist_of(order_spec))
    except BuildNetworkError:
        entries = ()
    sandbox = order_spec.get("sandbox")
    xcode = sandbox.get("xcode") if isinstance(sandbox, dict) else None
    enabled = isinstance(xcode, dict) and xcode.get("enabled") is True
    return {"build_network": entries, "xcode_sandbox": enabled}


@asynccontextmanager
async def build_network(
    entries: tuple[str, ...], directory: Path, policy: Callable[[], NetPolicy]
) -> AsyncIterator[Path | None]:
    """Serve an instance's allowlist proxy (its socket in *directory*) while in the block;
    the socket's path, or None without entries (no network at all). *policy*: the device's
    network policy, read per connection (the supervisor assigns it once the device is open)."""
    if not entries:
        yield None
        return
    parsed = parse_allowlist(list(entries))
    path = directory / "proxy.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_allowlist_proxy, path, parsed, policy)
        yield path
        nursery.cancel_scope.cancel()
