"""The processes of `bench replicas`: N clustered `devyard server` replicas on one PostgreSQL
database, host daemons linked to them, and optionally HAProxy in front.

Every process is a real one started by the CLI, in its own process group, its output in a log
file in the stack's directory (the tail is shown when something fails). Ports are chosen here
(each replica's ``peer_url`` names its raw link port, so it must be known before the start).
Stopping sends SIGTERM to every group at once, waits a bounded time, then SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Final

import attrs
import httpx
import trio

from bench._results import cpu_seconds
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token

__all__ = ["HAPROXY", "Proc", "Stack", "StackError", "postgres_pids", "process_tree_cpu", "stack"]

DEVYARD: Final = [sys.executable, "-m", "devyard"]
HAPROXY: Final = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
)
SECRET: Final = "bench-replicas-cluster-secret-0123456789"
START_TIMEOUT: Final = 90.0
STOP_GRACE: Final = 5.0
REGION: Final = "local"


class StackError(Exception):
    """A process of the stack would not start or link; the message says which and why."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.define
class Proc:
    name: str
    process: trio.Process
    log: Path

    def tail(self, lines: int = 12) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return ""
        return "\n  " + "\n  ".join(text) if text else ""

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)


@attrs.define
class Stack:
    replicas: list[Proc]
    urls: list[str]  # each replica's API base URL
    hosts: list[Proc]
    haproxy: Proc | None
    lb_url: str | None
    key: str

    def replica_cpu(self) -> float:
        return sum(p.cpu() for p in self.replicas)

    def host_cpu(self) -> float:
        return sum(p.cpu() for p in self.hosts)


def postgres_pids(datadir: Path) -> int | None:
    """The postmaster's pid (its ``postmaster.pid``), or None where it cannot be read."""
    try:
        return int((datadir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def process_tree_cpu(pid: int | None) -> float | None:
    """CPU seconds of *pid* and its children now (PostgreSQL's backends); None without it."""
    if pid is None:
        return None
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return cpu_seconds(pid) + sum(cpu_seconds(int(c)) for c in children)


async def _spawn(name: str, argv: list[str], directory: Path, env: dict[str, str]) -> Proc:
    log = directory / f"{name}.log"
    with log.open("wb") as out:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=env,
        )
    return Proc(name, process, log)


async def _stop_all(procs: list[Proc]) -> None:
    """SIGTERM to every group at once, a bounded wait, then SIGKILL. Shielded."""
    with trio.CancelScope(shield=True):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            running = [p for p in procs if p.process.returncode is None]
            for p in running:
                with suppress(ProcessLookupError):
                    os.killpg(p.process.pid, sig)
            with trio.move_on_after(STOP_GRACE):
                for p in running:
                    await p.process.wait()
        for p in procs:
            await p.process.wait()


def _replica_config(name: str, database_url: str, api: int, link: int) -> str:
    return f"""\
replica_id = "{name}"
database_url = "{database_url}"
listen = "127.0.0.1:{api}"
link_listen = "127.0.0.1:{link}"
drain_timeout = 1
shutdown_grace = 1

[rate_limit]
enabled = false

[cluster]
enabled = true
peer_url = "tcp://127.0.0.1:{link}"

[peers]
cluster_secret = "{SECRET}"
"""


def _haproxy_config(bind: int, urls: list[str]) -> str:
    servers = "\n".join(
        f"    server r{i + 1} {url.removeprefix('http://')}" for i, url in enumerate(urls)
    )
    return f"""\
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 300s

frontend bench
    bind 127.0.0.1:{bind}
    default_backend replicas

backend replicas
    balance roundrobin
{servers}
"""


async def _ready(http: httpx.AsyncClient, proc: Proc, url: str) -> dict[str, object]:
    """Poll *url*'s /readyz until 200; its body."""
    while True:
        if proc.process.returncode is not None:
            raise StackError(f"{proc.name} exited ({proc.process.returncode}){proc.tail()}")
        with suppress(httpx.HTTPError):
            answer = await http.get(f"{url}/readyz")
            if answer.status_code == 200:
                body: dict[str, object] = answer.json()
                return body
        await trio.sleep(0.1)


async def _wait_links(http: httpx.AsyncClient, stack_: Stack, hosts: int) -> None:
    """Until the replicas report *hosts* host links between them."""
    while True:
        linked = 0
        for proc, url in zip(stack_.replicas, stack_.urls, strict=True):
            links = (await _ready(http, proc, url)).get("links")
            linked += int(links.get("host", 0)) if isinstance(links, dict) else 0
        if linked >= hosts:
            return
        for host in stack_.hosts:
            if host.process.returncode is not None:
                raise StackError(f"{host.name} exited ({host.process.returncode}){host.tail()}")
        await trio.sleep(0.1)


@contextmanager
def _bounded(what: str, procs: list[Proc]) -> Iterator[None]:
    """START_TIMEOUT for *what*; then a StackError with the tails of the processes' logs."""
    try:
        with trio.fail_after(START_TIMEOUT):
            yield
    except trio.TooSlowError:
        tails = "".join(f"\n{p.name}:{p.tail(5)}" for p in procs)
        raise StackError(f"{what} did not come up within {START_TIMEOUT:.0f} s{tails}") from None


@asynccontextmanager
async def stack(
    directory: Path,
    database_url: str,
    key: str,
    *,
    replicas: int,
    hosts: int,
    capacity: int,
    haproxy: bool = False,
) -> AsyncIterator[Stack]:
    """*replicas* replicas and *hosts* host daemons (host i linked to replica i mod N, on the
    raw link port), all ready and linked; HAProxy in front with *haproxy*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    token_file = directory / "r1" / HOST_TOKENS_FILE
    for i in range(replicas):
        (directory / f"r{i + 1}").mkdir(mode=0o700)
    tokens = [create_host_token(token_file)[1] for _ in range(hosts)]
    # Host tokens live in each replica's data dir (until they are shared in PostgreSQL): a
    # copy of the one file in every replica's.
    for i in range(1, replicas):
        shutil.copy(token_file, directory / f"r{i + 1}" / HOST_TOKENS_FILE)
    procs: list[Proc] = []
    try:
        ports = [(free_port(), free_port()) for _ in range(replicas)]
        for i, (api, link) in enumerate(ports):
            name = f"r{i + 1}"
            config = directory / f"{name}.toml"
            config.write_text(_replica_config(name, database_url, api, link))
            argv = [*DEVYARD, "server", "--config", str(config), "--data-dir"]
            argv += [str(directory / name), "--log-level", "warning"]
            procs.append(await _spawn(name, argv, directory, env))
        built = Stack(
            procs[:replicas], [f"http://127.0.0.1:{a}" for a, _ in ports], [], None, None, key
        )
        async with httpx.AsyncClient(timeout=5) as http:
            with _bounded("the replicas", procs):
                for proc, url in zip(built.replicas, built.urls, strict=True):
                    await _ready(http, proc, url)
            for i, token in enumerate(tokens):
                name = f"h{i + 1}"
                (directory / f"{name}.token").write_text(token)
                api, link = ports[i % replicas]
                argv = [*DEVYARD, "hostd", "--server", f"http://127.0.0.1:{api}"]
                argv += ["--link", f"tcp://127.0.0.1:{link}", "--region", REGION]
                argv += ["--token-file", str(directory / f"{name}.token")]
                argv += ["--capacity", str(capacity), "--data-dir", str(directory / name)]
                argv += ["--log-level", "warning"]
                proc = await _spawn(name, argv, directory, env)
                procs.append(proc)
                built.hosts.append(proc)
            with _bounded("the host links", procs):
                await _wait_links(http, built, hosts)
            if haproxy and HAPROXY is not None:
                bind = free_port()
                config = directory / "haproxy.cfg"
                config.write_text(_haproxy_config(bind, built.urls))
                proc = await _spawn("haproxy", [HAPROXY, "-db", "-f", str(config)], directory, env)
                procs.append(proc)
                built.haproxy, built.lb_url = proc, f"http://127.0.0.1:{bind}"
                with _bounded("haproxy", procs):
                    await _ready(http, proc, built.lb_url)
        yield built
    finally:
        await _stop_all(procs)
