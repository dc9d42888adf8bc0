"""The local end of ADB over WebSocket: ``devyard adb forward`` and ``devyard adb connect``.

`adb connect HOST:PORT` wants a TCP port; the instance offers ``adbWebSocketUrl``. The
forwarder listens on 127.0.0.1 and carries each local connection over its own WebSocket to
the instance (the edge, the host link, the device: docs/adb.md).

A forwarder that accepts a connection and only then finds out that the instance cannot be
reached leaves ``adb connect`` hanging (docs/devices.md, "Pitfall"). So `check_reachable`
opens the WebSocket once *before* the listener exists, and fails with the server's own message
(401 wrong token, 404 unknown, 410 terminated); a later failure closes the local connection at
once, which ``adb`` reports instead of waiting.

When the server has a raw link port, the WebSocket's 101 names it (``x-devyard-raw-link``) and
the forwarder carries connections there instead (docs/adb.md, "The raw ADB path"): the same
token and checks, then ADB bytes on the bare socket, none of the WebSocket masking and framing
that cost more CPU than the device itself. If the raw port cannot be reached from here (a
firewall, a proxy that passes only HTTP), the forwarder stays on the WebSocket.
"""

from __future__ import annotations

import logging
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import trio
import trio_websocket

from ..core import UpgradeRejected
from ..core.adb_splice import adb_splice
from ..core.transports import MessageStream, is_loopback_host, open_transport
from ._errors import DevyardError, NotFoundError
from .client import AsyncClient

log = logging.getLogger(__name__)

__all__ = [
    "AdbTarget",
    "ForwardError",
    "check_reachable",
    "resolve_target",
    "serve_forward",
    "watch_instance",
]

WATCH_INTERVAL_S: Final = 10.0
_CHECK_TIMEOUT_S: Final = 15.0
_RAW_CHECK_TIMEOUT_S: Final = 5.0
#: The adb WebSocket's 101 header naming the raw link port (devyard.server.edge.gateway).
RAW_LINK_HEADER: Final = b"x-devyard-raw-link"


class ForwardError(DevyardError):
    """The instance's ADB endpoint cannot be used; the message says why."""


@attrs.frozen
class AdbTarget:
    instance_id: str
    url: str
    token: str = attrs.field(repr=False)
    raw_url: str | None = None  # the same endpoint on the raw link port, once checked

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"authorization", f"Bearer {self.token}".encode())]


async def resolve_target(client: AsyncClient, instance_id: str) -> AdbTarget:
    """The ADB WebSocket of a ready Android instance, or ForwardError saying what is wrong."""
    if not instance_id.startswith("android_"):
        raise ForwardError(f"{instance_id} is not an Android instance id (android_...)")
    data: Any = await client.request("GET", f"/v1/android_instances/{instance_id}")
    status = data.get("status", {}) if isinstance(data, dict) else {}
    state = status.get("state")
    if state != "ready":
        why = f": {status['errorMessage']}" if status.get("errorMessage") else ""
        raise ForwardError(f"instance {instance_id} is {state}, not ready{why}")
    url, token = status.get("adbWebSocketUrl"), status.get("token")
    if not url:
        raise ForwardError(f"instance {instance_id} has no adbWebSocketUrl")
    if not token:
        raise ForwardError(
            f"the API key cannot control instance {instance_id} (a read-only key or a viewer "
            "does not get the instance token)"
        )
    return AdbTarget(instance_id, str(url), str(token))


def _rejection(
    target: AdbTarget, exc: trio_websocket.ConnectionRejected | UpgradeRejected
) -> ForwardError:
    body = (exc.body or b"").decode(errors="replace")
    try:
        import json  # noqa: PLC0415 - only on this error path

        message = str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        message = body.strip() or "no reason given"
    return ForwardError(
        f"the server refused the ADB connection to {target.instance_id} "
        f"(HTTP {exc.status_code}): {message}"
    )


async def check_reachable(target: AdbTarget, *, raw: bool = True) -> AdbTarget:
    """Open the ADB WebSocket once and close it: ForwardError if the server refuses it.

    Returns the target with `raw_url` set when the server names a raw link port (and *raw*)
    and one connection there was accepted too."""
    advertised = None
    try:
        with trio.fail_after(_CHECK_TIMEOUT_S):
            async with open_transport(target.url, extra_headers=target.headers) as ws:
                if isinstance(ws, MessageStream):
                    for name, value in ws.handshake_headers:
                        if name.lower() == RAW_LINK_HEADER:
                            advertised = value.decode("latin-1")
    except (trio_websocket.ConnectionRejected, UpgradeRejected) as exc:
        raise _rejection(target, exc) from None
    except (OSError, trio_websocket.HandshakeError, trio.TooSlowError) as exc:
        raise ForwardError(f"cannot reach {target.url}: {exc or type(exc).__name__}") from None
    if not raw or advertised is None:
        return target
    parts = urlsplit(target.url)
    if is_loopback_host(urlsplit(advertised).hostname) and not is_loopback_host(parts.hostname):
        log.info("ignoring raw link %s: loopback, but the server is not", advertised)
        return target  # never hand the token to a port on this machine the server cannot be
    raw_url = f"{advertised.rstrip('/')}{parts.path}"
    try:
        with trio.fail_after(_RAW_CHECK_TIMEOUT_S):
            async with open_transport(raw_url, extra_headers=target.headers):
                pass
    except (
        OSError,
        ValueError,
        UpgradeRejected,
        trio.BrokenResourceError,
        trio.TooSlowError,
    ) as exc:
        log.info("raw link %s not usable from here (%s): staying on the WebSocket", raw_url, exc)
        return target
    return attrs.evolve(target, raw_url=raw_url)


async def _carry(target: AdbTarget, local: trio.SocketStream) -> None:
    try:
        url = target.raw_url or target.url
        async with open_transport(url, extra_headers=target.headers) as remote:
            # adb keeps one write in flight per stream: acknowledging its writes here, next to
            # it, saves the round trip through the bridge per write (docs/adb.md)
            await adb_splice(local, remote)
    except (trio_websocket.ConnectionRejected, UpgradeRejected) as exc:
        log.warning("%s", _rejection(target, exc))
    except (OSError, trio_websocket.HandshakeError, trio.BrokenResourceError) as exc:
        log.warning("ADB connection to %s failed: %s", target.instance_id, exc)
    finally:
        await trio.aclose_forcefully(local)


async def serve_forward(
    target: AdbTarget,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    raw: bool = True,
    task_status: trio.TaskStatus[tuple[int, str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Check the target, listen on host:port, carry every connection until cancelled (over
    the raw link port when the server offers one that answers, and *raw*).

    `task_status` gets the bound port and the URL connections go to, once the listener exists
    (after the check)."""
    target = await check_reachable(target, raw=raw)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host, backlog=16)
    except OSError as exc:
        raise ForwardError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    bound = int(listeners[0].socket.getsockname()[1])

    async def handle(local: trio.SocketStream) -> None:
        await _carry(target, local)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handle, listeners)
        task_status.started((bound, target.raw_url or target.url))


async def watch_instance(client: AsyncClient, instance_id: str) -> str:
    """Return once the instance is no longer ready (the reason, for people)."""
    while True:
        await trio.sleep(WATCH_INTERVAL_S)
        try:
            await resolve_target(client, instance_id)
        except ForwardError as exc:
            return str(exc)
        except NotFoundError:
            return f"instance {instance_id} is gone"
        except DevyardError as exc:
            log.info("checking %s: %s", instance_id, exc)  # a blip: keep forwarding
