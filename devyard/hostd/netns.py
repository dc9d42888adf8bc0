"""Linux network namespaces for processes hostd starts: create, reach inside, remove, sweep.

A namespace made here (`create`) has only its loopback, up, and no other interface and no
route: a process in it (``exec_argv``) reaches nothing but its own ``127.0.0.1``, and any
UDP or TCP to another address fails with "network unreachable". hostd reaches into it without
leaving its own namespace: `socket_in` makes a socket *inside* (a socket keeps the namespace
it was created in), which hostd then binds or connects from its own trio loop. `relay_into`
serves a host loopback port that splices each connection to the same port inside;
`relay_out` serves a port inside that splices each connection to a host address. Nothing
else is ever connected, so the namespace's loopback is not the host's.

`socket_in` needs setns(2), which Python 3.11's ``os`` lacks: it runs ``libc.setns`` through
ctypes in a thread started for that one call and then ended, so the switch never outlives the
call and never touches a thread another task reuses (trio's worker threads are cached).

Namespaces are named ``PREFIX + suffix``, the prefix being hostd's own (`owner_prefix`, from
its data directory): `remove` ends what runs inside and deletes the namespace; `sweep` does
that for every namespace with the prefix that a crash left behind (hostd's CLI calls it at
start). Everything here needs root (CAP_SYS_ADMIN) and iproute2's ``ip``; `unavailable` says
why it cannot be used.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

import trio

from ..core import splice

log = logging.getLogger(__name__)

__all__ = [
    "NetnsError",
    "NetnsMode",
    "create",
    "exec_argv",
    "find_ip",
    "owner_prefix",
    "parse_list",
    "relay_into",
    "relay_out",
    "remove",
    "socket_in",
    "sweep",
    "unavailable",
]

_CLONE_NEWNET: Final = 0x40000000
_RUN_NETNS: Final = Path("/run/netns")
_IP_TIMEOUT_S: Final = 10.0
_CONNECT_TIMEOUT_S: Final = 10.0
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_T = TypeVar("_T")


class NetnsMode(enum.StrEnum):
    """``--emulator-netns``: whether launched emulators get a namespace of their own."""

    AUTO = "auto"  # when root on Linux with `ip`; otherwise warn once and run without
    REQUIRED = "required"  # refuse to launch without one
    OFF = "off"  # never (the guest reaches the host's loopback: docs/tunnels.md)


class NetnsError(OSError):
    """A namespace could not be made, entered or removed."""


# -- pure -----------------------------------------------------------------------------------


def owner_prefix(data_dir: Path) -> str:
    """hostd's own name prefix: ``dy`` + 6 hex of its data directory's absolute path + ``-``
    (two daemons on one machine never sweep each other's namespaces)."""
    digest = hashlib.sha256(str(data_dir.absolute()).encode()).hexdigest()[:6]
    return f"dy{digest}-"


def parse_list(text: str) -> list[str]:
    """Names from ``ip netns list`` (``NAME`` or ``NAME (id: N)`` per line)."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def exec_argv(ip: str, name: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside namespace ``name`` (``ip netns exec`` execs it: same pid)."""
    return [ip, "netns", "exec", name, *argv]


def unavailable(
    ip: str | None, *, platform: str = sys.platform, euid: int | None = None
) -> str | None:
    """Why namespaces cannot be used here (None: they can)."""
    if not platform.startswith("linux"):
        return f"network namespaces are Linux-only (this is {platform})"
    if (os.geteuid() if euid is None else euid) != 0:
        return "creating a network namespace needs root"
    if ip is None:
        return "iproute2's `ip` is not installed (apt install iproute2)"
    return None


def find_ip(path: str | None) -> str | None:
    """iproute2's ``ip`` on ``path`` (the tools' PATH), else in /usr/sbin or /sbin."""
    for candidate in (shutil.which("ip", path=path), "/usr/sbin/ip", "/sbin/ip"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(f"bad namespace name {name!r}")
    return name


# -- the `ip` tool --------------------------------------------------------------------------


def _ip_sync(ip: str, *args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - our own `ip` with arguments we built
            [ip, *args], capture_output=True, timeout=_IP_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"`ip {' '.join(args)}`: {exc}") from exc
    if check and done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise NetnsError(f"`ip {' '.join(args)}` exited {done.returncode}: {err}")
    return done.stdout.decode(errors="replace")


async def _ip(ip: str, *args: str, check: bool = True) -> str:
    return await trio.to_thread.run_sync(partial(_ip_sync, ip, *args, check=check))


async def create(ip: str, name: str) -> None:
    """Namespace ``name`` with its loopback up and nothing else."""
    await _ip(ip, "netns", "add", _check_name(name))
    try:
        await _ip(ip, "-n", name, "link", "set", "lo", "up")
    except BaseException:
        with trio.CancelScope(shield=True):
            await remove(ip, name)
        raise


def _remove_sync(ip: str, name: str) -> None:
    """SIGKILL whatever still runs inside, then delete the namespace (no error if gone)."""
    if not (_RUN_NETNS / name).exists():
        return
    for word in _ip_sync(ip, "netns", "pids", name, check=False).split():
        if word.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(word), signal.SIGKILL)
    _ip_sync(ip, "netns", "delete", name, check=False)
    if (_RUN_NETNS / name).exists():
        raise NetnsError(f"network namespace {name} could not be deleted")


async def remove(ip: str, name: str) -> None:
    await trio.to_thread.run_sync(_remove_sync, ip, _check_name(name))


def sweep(ip: str, prefix: str) -> list[str]:
    """Remove every namespace named ``prefix...`` (left by a crash); the names removed."""
    removed = []
    for name in parse_list(_ip_sync(ip, "netns", "list", check=False)):
        if name.startswith(prefix) and _NAME_RE.match(name):
            _remove_sync(ip, name)
            removed.append(name)
    return removed


# -- sockets inside -------------------------------------------------------------------------


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NetnsError(errno, f"setns: {os.strerror(errno)}")


def _in_namespace(name: str, make: Callable[[], _T]) -> _T:
    """``make()`` run in a fresh thread that first joins namespace ``name``."""
    result: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fd = os.open(_RUN_NETNS / name, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            result.append(make())
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()  # setns + socket(): no blocking call inside
    if errors:
        raise errors[0]
    return result[0]


async def socket_in(name: str, kind: int = socket.SOCK_STREAM) -> trio.socket.SocketType:
    """An IPv4 socket (TCP, or ``kind``) that belongs to namespace ``name``."""
    make = partial(socket.socket, socket.AF_INET, kind)
    try:
        sock = await trio.to_thread.run_sync(_in_namespace, _check_name(name), make)
    except FileNotFoundError:
        raise NetnsError(f"no network namespace {name}") from None
    return trio.socket.from_stdlib_socket(sock)


async def _connect_inside(name: str, port: int) -> trio.SocketStream:
    sock = await socket_in(name)
    try:
        with trio.fail_after(_CONNECT_TIMEOUT_S):
            await sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def _splice_inside(name: str, port: int, client: trio.SocketStream) -> None:
    try:
        inside = await _connect_inside(name, port)
    except (OSError, trio.TooSlowError) as exc:
        log.debug("netns %s: 127.0.0.1:%d inside: %r", name, port, exc)
        await trio.aclose_forcefully(client)
        return
    await splice(client, inside)


async def _splice_out(address: tuple[str, int], client: trio.SocketStream) -> None:
    try:
        with trio.fail_after(_CONNECT_TIMEOUT_S):
            outside = await trio.open_tcp_stream(*address)
    except (OSError, trio.TooSlowError) as exc:
        log.debug("netns relay to %s:%d: %r", address[0], address[1], exc)
        await trio.aclose_forcefully(client)
        return
    await splice(client, outside)


async def _serve(
    listener: trio.SocketListener, handler: Callable[[trio.SocketStream], Awaitable[None]]
) -> None:
    async def handle(stream: trio.SocketStream) -> None:
        try:
            await handler(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("netns relay: %r", exc)  # one connection's failure is its own

    await trio.serve_listeners(handle, [listener])


async def relay_into(
    name: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the host's ``127.0.0.1:port``: each connection is spliced to ``127.0.0.1:port``
    inside namespace ``name``. Runs until cancelled."""
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1", backlog=16)
    async with listeners[0]:
        task_status.started()
        await _serve(listeners[0], partial(_splice_inside, name, port))


async def relay_out(
    name: str, to: tuple[str, int], *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve an ephemeral ``127.0.0.1`` port inside namespace ``name`` (the port is what
    `nursery.start` returns): each connection is spliced to ``to`` on the host."""
    sock = await socket_in(name)
    try:
        await sock.bind(("127.0.0.1", 0))
        sock.listen(16)
    except BaseException:
        sock.close()
        raise
    listener = trio.SocketListener(sock)
    async with listener:
        task_status.started(int(sock.getsockname()[1]))
        await _serve(listener, partial(_splice_out, to))
