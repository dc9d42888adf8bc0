"""A launched emulator's network: a namespace of its own, whose only way out is its proxy.

Without it the emulator runs in the host's network namespace, and its guest reaches the host's
loopback as 10.0.2.2 (slirp maps it to the emulator process's ``127.0.0.1``: the control API,
the raw link port, other instances' egress proxies) and sends UDP wherever it likes. With it
(`use_netns`; hostd's ``--emulator-netns``), `Isolation.run`:

- creates namespace ``PREFIX<console port>`` (hostd/netns.py) with only a loopback, so the
  guest's 10.0.2.2 is that loopback and no route leads anywhere: UDP fails with "network
  unreachable", it is never sent from the host;
- serves, on ``127.0.0.1:<ephemeral>`` inside, a relay to the instance's egress proxy on the
  host (a tunnel-attached instance's, from `DeviceSpec.http_proxy`; else one started here
  with no tunnel and the host's `NetPolicy`: public addresses only). `proxy_url` is that
  relay with the proxy's credentials, which the emulator is launched with (``http_proxy``,
  read like ``-http-proxy``): every guest TCP connection is policy-checked by the proxy;
- answers DNS on ``127.0.0.1:53`` inside from hostd's own resolver (`serve_dns`, dnsmsg.py;
  the emulator is launched with ``-dns-server 127.0.0.1``), so guest names resolve although
  no UDP leaves the namespace;
- serves the host's ``127.0.0.1:<console>`` and ``<console + 1>`` as relays to the emulator's
  console and adbd inside, and tells the adb server about the emulator once its adbd
  answers (``host:emulator:PORT``, what an emulator does itself when it shares the host's
  loopback), so adb, the ADB bridge and ``adb emu kill`` work as without a namespace;
- on `aclose` (or cancellation) ends the relays, kills whatever still runs inside and deletes
  the namespace, within a bounded time.

The relays run in hostd's own loop (sockets made inside the namespace, netns.socket_in): no
helper process to start, watch or leave behind, and nothing survives hostd but the namespace
itself, which hostd's next start sweeps (netns.sweep over its prefix).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Final
from urllib.parse import urlsplit

import trio

from ... import dnsmsg, netns
from ...egress import EgressProxy
from .._errors import InvalidSpecError
from .adb import AdbCli
from .config import EmulatorConfig

log = logging.getLogger(__name__)

__all__ = [
    "DNS_INSIDE",
    "Isolation",
    "check_mode_for_attach",
    "inside_url",
    "serve_dns",
    "use_netns",
]

_POLL_S: Final = 0.5
_CLEANUP_S: Final = 30.0
_REGISTER_S: Final = 5.0
DNS_INSIDE: Final = "127.0.0.1"  # where `serve_dns` answers: the emulator's -dns-server
_DNS_TIMEOUT_S: Final = 5.0
_DNS_IN_FLIGHT: Final = 32  # queries beyond are dropped: the client retries

_warned = False


def use_netns(config: EmulatorConfig) -> bool:
    """Whether to launch in a namespace. ``required`` and unavailable: `InvalidSpecError`;
    ``auto`` and unavailable: False, with one warning per process."""
    global _warned  # noqa: PLW0603 - one warning per process, not per instance
    if config.netns is netns.NetnsMode.OFF:
        return False
    reason = netns.unavailable(netns.find_ip(config.tool_env().get("PATH")))
    if reason is None:
        return True
    if config.netns is netns.NetnsMode.REQUIRED:
        raise InvalidSpecError(
            f"--emulator-netns required: an emulator cannot get a network namespace ({reason})"
        )
    if not _warned:
        _warned = True
        log.warning(
            "emulators run without a network namespace of their own (%s): a guest reaches "
            "this host's loopback services at 10.0.2.2 and its UDP is not proxied "
            "(docs/tunnels.md 'Egress'); --emulator-netns required refuses to run so",
            reason,
        )
    return False


def inside_url(proxy_url: str, port: int) -> str:
    """``proxy_url`` (``http://USER:PASSWORD@HOST:PORT``) with its address replaced by the
    relay inside the namespace, ``127.0.0.1:port``; the credentials kept as they are."""
    parts = urlsplit(proxy_url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return f"{parts.scheme}://{userinfo}{at}127.0.0.1:{port}"


def _proxy_address(proxy_url: str) -> tuple[str, int]:
    parts = urlsplit(proxy_url)
    if parts.hostname is None or parts.port is None:
        raise InvalidSpecError("the instance's egress proxy URL names no address")
    return parts.hostname, parts.port


class Isolation:
    """One launched emulator's namespace and relays (see the module doc). Run `run` in a
    nursery with ``nursery.start``; `aclose` ends it and waits until the namespace is gone."""

    def __init__(
        self, config: EmulatorConfig, instance_id: str, console_port: int, http_proxy: str | None
    ) -> None:
        ip = netns.find_ip(config.tool_env().get("PATH"))
        if ip is None:
            raise InvalidSpecError("iproute2's `ip` is not installed (apt install iproute2)")
        self.ip = ip
        self.name = f"{config.netns_prefix}{console_port}"
        self.proxy_url = ""  # inside_url: set once `run` started
        self._config = config
        self._instance_id = instance_id
        self._console = console_port
        self._http_proxy = http_proxy
        self._scope = trio.CancelScope()
        self._done = trio.Event()

    def __repr__(self) -> str:
        return f"Isolation({self.name})"

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` (the emulator's, with ``-dns-server`` `DNS_INSIDE`) run inside."""
        return netns.exec_argv(self.ip, self.name, argv)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._scope:
                await netns.create(self.ip, self.name)
                async with trio.open_nursery() as nursery:
                    proxy_url = self._http_proxy
                    if proxy_url is None:  # no tunnel: the host's policy, public addresses only
                        proxy = EgressProxy(
                            self._instance_id, (), None, policy=self._config.net_policy
                        )
                        await nursery.start(proxy.serve)
                        proxy_url = proxy.endpoint.url
                    inside: int = await nursery.start(
                        netns.relay_out, self.name, _proxy_address(proxy_url)
                    )
                    self.proxy_url = inside_url(proxy_url, inside)
                    await nursery.start(serve_dns, self.name)
                    for port in (self._console, self._console + 1):
                        await nursery.start(netns.relay_into, self.name, port)
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_S):
                try:
                    await netns.remove(self.ip, self.name)
                except netns.NetnsError as exc:
                    log.error("instance %s: %s", self._instance_id, exc)
            self._done.set()

    async def aclose(self) -> None:
        self._scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_S + 1):
            await self._done.wait()

    async def register(self, adb: AdbCli) -> None:
        """Once the emulator's adbd accepts inside, tell the adb server (``host:emulator``);
        retried until the server takes it. The caller bounds the time (the boot timeout)."""
        adbd = self._console + 1
        while True:
            try:
                probe = await netns.socket_in(self.name)
                with probe, trio.fail_after(_REGISTER_S):
                    await probe.connect(("127.0.0.1", adbd))
                await _notify(adb, adbd)
                return
            except (OSError, trio.TooSlowError) as exc:
                log.debug("%s: adbd not registered yet: %r", self.name, exc)
            await trio.sleep(_POLL_S)


async def serve_dns(
    name: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Answer address queries on ``127.0.0.1:53`` inside namespace ``name`` (module doc)."""
    sock = await netns.socket_in(name, socket.SOCK_DGRAM)
    with sock:
        await sock.bind((DNS_INSIDE, 53))
        task_status.started()
        in_flight = 0

        async def reply(query: dnsmsg.Query, peer: tuple[object, ...]) -> None:
            nonlocal in_flight
            try:
                data = await _resolve(query)
                try:
                    await sock.sendto(data, peer)
                except OSError as exc:
                    log.debug("netns %s: DNS reply: %r", name, exc)
            finally:
                in_flight -= 1

        async with trio.open_nursery() as nursery:
            while True:
                try:
                    data, peer = await sock.recvfrom(dnsmsg.MAX_QUERY + 1)
                except OSError as exc:  # a datagram's own trouble, never the server's
                    log.debug("netns %s: DNS receive: %r", name, exc)
                    await trio.lowlevel.checkpoint()
                    continue
                query = dnsmsg.parse_query(data)
                if query is not None and in_flight < _DNS_IN_FLIGHT:
                    in_flight += 1
                    nursery.start_soon(reply, query, peer)


async def _resolve(query: dnsmsg.Query) -> bytes:
    """The reply to ``query`` from hostd's resolver: NXDOMAIN only when the name has no
    address at all, "no data" when it has none of the family asked."""
    if query.family is None:
        return dnsmsg.answer(query, [])
    try:
        with trio.fail_after(_DNS_TIMEOUT_S):
            infos = await trio.socket.getaddrinfo(query.name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno == getattr(socket, "EAI_NODATA", None):  # the name is, without addresses
            return dnsmsg.answer(query, [])
        gone = exc.errno == socket.EAI_NONAME
        return dnsmsg.failure(query, dnsmsg.Rcode.NXDOMAIN if gone else dnsmsg.Rcode.SERVFAIL)
    except (trio.TooSlowError, OSError, UnicodeError):
        return dnsmsg.failure(query, dnsmsg.Rcode.SERVFAIL)
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    return dnsmsg.answer(query, addresses)


async def _notify(adb: AdbCli, adbd_port: int) -> None:
    """``host:emulator:PORT`` to the adb server: it connects to ``127.0.0.1:PORT`` (our relay)
    and names the device ``emulator-<PORT - 1>``. The server answers nothing to it."""
    with trio.fail_after(_REGISTER_S):
        stream = await trio.open_tcp_stream("127.0.0.1", adb.effective_server_port)
        async with stream:
            request = f"host:emulator:{adbd_port}".encode()
            await stream.send_all(b"%04x" % len(request) + request)


def check_mode_for_attach(config: EmulatorConfig) -> None:
    """An attached emulator runs outside any namespace of ours: ``required`` refuses it."""
    if config.netns is netns.NetnsMode.REQUIRED:
        raise InvalidSpecError(
            "--emulator-netns required: an attached emulator (DEVYARD_EMULATOR_ATTACH) runs "
            "outside a network namespace of this host's"
        )
