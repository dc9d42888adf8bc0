"""One instance's headless Chromium: its process, its profile, its proxy and its memory bound.

`Chromium.run` (a task of the instance, started with ``nursery.start``) does, in order:

1. a fresh profile ``<sandbox>/browser/profile`` (``--user-data-dir``), with the chrome://flags
   entries of the spec in its ``Local State`` (``browser.enabled_labs_experiments``);
2. the browser's proxy (`BrowserProxy`) on a random ``127.x.y.z`` address, dialling as the
   instance's device does (its tunnel's selectors first, then the host's `NetPolicy`);
3. ``chromium --headless --remote-debugging-port=0 ...`` in its own session (process group),
   output to ``<sandbox>/browser/chromium.log``; the port is read from the profile's
   ``DevToolsActivePort``, the version document from ``/json/version``;
4. until cancelled: a watchdog that sums the resident memory of the process group and ends the
   browser (a `DeviceError`, which ends the instance) above ``memory_limit``; a browser that
   exits on its own is a `DeviceError` too;
5. on the way out (always): SIGTERM to the group, SIGKILL after `_STOP_GRACE_S`.

Why no proxy credentials: Chromium takes none on its command line (``--proxy-server`` has no
user-info), so the proxy is unauthenticated but listens on a random address of 127/8 other
than 127.0.0.1: devices cannot reach any loopback address (netpolicy.py), and an emulator's
guest reaches only 127.0.0.1 (its 10.0.2.2). ``--proxy-bypass-list=<-loopback>`` sends loopback
URLs to the proxy too, where the policy decides about them like about any other address.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ...core import splice
from ...core.chrome_flags import ChromeFlag
from ..drivers import DeviceError
from ..proxy_protocol import Dial, DialFailure, Handshake, Reject, Reply

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CHROMIUM", "DEFAULT_MEMORY_LIMIT", "BrowserConfig", "BrowserDial", "Chromium"]

DEFAULT_CHROMIUM: Final = Path("/usr/bin/chromium")
DEFAULT_MEMORY_LIMIT: Final = 2 * 1024 * 1024 * 1024
_JS_HEAP_MB: Final = 512
_RENDERER_LIMIT: Final = 4
_START_TIMEOUT_S: Final = 30.0
_STOP_GRACE_S: Final = 3.0
_WATCH_EVERY_S: Final = 2.0
_POLL_S: Final = 0.05
_HEAD_TIMEOUT_S: Final = 30.0
_RECEIVE: Final = 16 * 1024
_MAX_DOCUMENT: Final = 1024 * 1024

#: Dials host:port for the browser as for the instance's device; raises on refusal
#: (`EgressProxy.dial`: `EgressDialError` with the failure to report).
BrowserDial = Callable[[str, int], Awaitable[trio.abc.Stream]]


@attrs.frozen
class BrowserConfig:
    executable: Path = DEFAULT_CHROMIUM
    flags: tuple[ChromeFlag, ...] = ()
    memory_limit: int = DEFAULT_MEMORY_LIMIT  # bytes of resident memory, the whole group
    width: int = 1080
    height: int = 1920


class BrowserProxy:
    """An unauthenticated HTTP CONNECT / SOCKS5 proxy for one browser (see the module doc)."""

    def __init__(self, instance_id: str, dial: BrowserDial) -> None:
        self.instance_id = instance_id
        self._dial = dial
        octets = (random.randint(1, 254), random.randint(0, 255), random.randint(1, 254))  # noqa: S311
        self.host = "127.{}.{}.{}".format(*octets)  # not a secret: see the module doc
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host=self.host, backlog=64)
        self.port = int(listeners[0].socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started()

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            upstream = await self._handshake(client)
            if upstream is not None:
                await splice(client, upstream)
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("browser proxy of %s: %r", self.instance_id, exc)
        except Exception:  # one bad client ends its own connection, never the proxy
            log.exception("browser proxy of %s: unexpected failure", self.instance_id)
        finally:
            await trio.aclose_forcefully(client)

    async def _handshake(self, client: trio.SocketStream) -> trio.abc.Stream | None:
        handshake = Handshake(None)
        with trio.fail_after(_HEAD_TIMEOUT_S):
            while True:
                for event in handshake.receive_data(await client.receive_some(_RECEIVE)):
                    if isinstance(event, Reply):
                        await client.send_all(event.data)
                    elif isinstance(event, Reject):
                        if event.data:
                            await client.send_all(event.data)
                        return None
                    else:
                        return await self._connect(client, handshake, event)

    async def _connect(
        self, client: trio.SocketStream, handshake: Handshake, request: Dial
    ) -> trio.abc.Stream | None:
        try:
            upstream = await self._dial(request.host, request.port)
        except Exception as exc:
            failure = getattr(exc, "failure", DialFailure.UNAVAILABLE)
            if not isinstance(failure, DialFailure):
                failure = DialFailure.UNAVAILABLE
            log.debug("browser of %s: %s:%d refused: %s", self.instance_id, request.host,
                      request.port, exc)  # fmt: skip
            await client.send_all(handshake.failed(failure))
            return None
        try:
            await client.send_all(handshake.succeeded())
            if request.forward or handshake.trailing:
                await upstream.send_all(request.forward + handshake.trailing)
        except BaseException:
            await trio.aclose_forcefully(upstream)
            raise
        return upstream


class Chromium:
    """One headless Chromium for an instance; `run` it with ``nursery.start``."""

    def __init__(
        self, instance_id: str, sandbox_dir: Path, config: BrowserConfig, dial: BrowserDial
    ) -> None:
        self.instance_id = instance_id
        self.dir = sandbox_dir / "browser"
        self.config = config
        self.proxy = BrowserProxy(instance_id, dial)
        self.port = 0
        self.browser_path = ""  # /devtools/browser/<id>
        self.version: dict[str, Any] = {}
        self.pid: int | None = None

    def __repr__(self) -> str:
        return f"Chromium({self.instance_id}, pid={self.pid}, port={self.port})"

    def argv(self) -> list[str]:
        config = self.config
        args = [
            str(config.executable),
            "--headless",
            "--no-sandbox",  # hostd may run as root; the instance sandbox is the host's
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-breakpad",
            "--disable-default-apps",
            "--no-first-run",
            "--no-default-browser-check",
            "--password-store=basic",
            "--use-mock-keychain",
            "--mute-audio",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.dir / 'profile'}",
            f"--proxy-server=http://{self.proxy.host}:{self.proxy.port}",
            "--proxy-bypass-list=<-loopback>",
            f"--window-size={config.width},{config.height}",
            f"--js-flags=--max-old-space-size={_JS_HEAP_MB}",
            f"--renderer-process-limit={_RENDERER_LIMIT}",
        ]
        args += [a for flag in config.flags if (a := flag.argument) is not None]
        args.append("about:blank")
        return args

    def _prepare(self) -> None:
        if not os.access(self.config.executable, os.X_OK):
            raise DeviceError(
                f"this host has no browser for the sandbox at {self.config.executable} "
                "(Debian's chromium: scripts/deps)"
            )
        profile = self.dir / "profile"
        profile.mkdir(parents=True, exist_ok=True, mode=0o700)
        labs = [flag.lab for flag in self.config.flags if flag.lab is not None]
        if labs:
            state = {"browser": {"enabled_labs_experiments": labs}}
            (profile / "Local State").write_text(json.dumps(state))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await trio.to_thread.run_sync(self._prepare)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.proxy.serve)
            log_path = self.dir / "chromium.log"
            log_file = await trio.to_thread.run_sync(lambda: log_path.open("wb"))
            try:
                process = await trio.lowlevel.open_process(
                    self.argv(), stdin=subprocess.DEVNULL, stdout=log_file,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            finally:
                log_file.close()
            self.pid = process.pid
            try:
                with trio.fail_after(_START_TIMEOUT_S):
                    await self._wait_devtools(process)
                    self.version = await _get_json(self.port, "/json/version")
                log.info(
                    "instance %s: browser sandbox up (%s, pid %d, devtools port %d)",
                    self.instance_id, self.version.get("Browser"), process.pid, self.port,
                )  # fmt: skip
                task_status.started()
                nursery.start_soon(self._watch_memory, process)
                code = await process.wait()
                raise DeviceError(f"the browser sandbox exited (status {code}); see its log")
            except trio.TooSlowError:
                raise DeviceError(
                    f"the browser sandbox did not start within {_START_TIMEOUT_S:g} s"
                ) from None
            finally:
                with trio.CancelScope(shield=True):
                    await _stop(process)

    async def _wait_devtools(self, process: trio.Process) -> None:
        active = self.dir / "profile" / "DevToolsActivePort"
        while True:
            if process.returncode is not None:
                raise DeviceError(
                    f"the browser sandbox exited at start (status {process.returncode})"
                )
            text = await trio.to_thread.run_sync(_read_text, active)
            lines = text.splitlines()
            if len(lines) >= 2 and lines[0].isdigit():
                self.port, self.browser_path = int(lines[0]), lines[1]
                return
            await trio.sleep(_POLL_S)

    async def _watch_memory(self, process: trio.Process) -> None:
        while True:
            await trio.sleep(_WATCH_EVERY_S)
            used = await trio.to_thread.run_sync(group_rss, process.pid)
            if used > self.config.memory_limit:
                log.warning("instance %s: browser sandbox uses %d MiB, over its limit",
                            self.instance_id, used >> 20)  # fmt: skip
                raise DeviceError(
                    f"the browser sandbox used {used >> 20} MiB, over its limit of "
                    f"{self.config.memory_limit >> 20} MiB"
                )


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in process group *pgid* (shared pages count in each)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) != pgid:  # state, ppid, pgrp
                continue
            with open(f"/proc/{entry.name}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


async def _stop(process: trio.Process) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
        with trio.move_on_after(_STOP_GRACE_S):
            await process.wait()
            break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever it left in its group
    await process.wait()


async def _get_json(port: int, path: str) -> dict[str, Any]:
    """GET http://127.0.0.1:*port**path* from the browser's DevTools server, as JSON (it
    speaks HTTP/1.1 only and keeps the connection: the body is read by its length)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        await stream.send_all(request.encode())
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _expected(data):
            chunk = await stream.receive_some(65536)
            if not chunk or len(data) > _MAX_DOCUMENT:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        raise DeviceError(f"the browser's {path} answered {head[:60]!r}")
    document = json.loads(body[: _expected(data) - len(head) - 4])
    if not isinstance(document, dict):
        raise DeviceError(f"the browser's {path} is not an object")
    return document


def _expected(data: bytes) -> int:
    """Bytes of the whole response in *data* (head, blank line, Content-Length of body)."""
    head, sep, _ = data.partition(b"\r\n\r\n")
    if not sep:
        return len(data) + 1
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(head) + 4 + int(value.strip())
    return len(data)
