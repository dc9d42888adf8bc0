"""A cluster of real processes on loopback (issue 23's done-when test): PostgreSQL, three
``devyard server`` replicas (``[cluster]`` and ``[peers]``), Debian's HAProxy in front with the
reference config (deploy/haproxy/haproxy.cfg, addresses from the environment), two host daemons
and two connectors of one tunnel, and a private HTTP server the tunnel reaches.

Placement of the links is steered, not left to chance: while a link is dialled, HAProxy sends
new connections to one replica only (its runtime API disables the others). Replica 1 holds
host 1 and both connectors (the second a standby), replica 2 holds host 2 and no connector (a
device there reaches the tunnel through replica 1), and replica 3 holds nothing: the replica
that must forward everything.

Host tokens live in PostgreSQL, shared by the replicas (docs/scale-out.md "Host tokens"): the
rig makes them with ``devyard admin host-token`` against the database alone (a data dir of
its own), and no replica's data dir holds a token file, so a host links to whichever replica
HAProxy picks only because the table is shared.
"""

from __future__ import annotations

import http.server
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
import pytest
import trio

from devyard.server.bootstrap import bootstrap_organization
from devyard.server.store import open_store
from tests.ports import free_port

from ._cli import clean_env

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or next(
    (p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None
)
DEVYARD = [sys.executable, "-m", "devyard"]
PRIVATE = "127.0.0.2"  # the tunnel's private network (Linux routes 127/8 to lo)
SECRET = "cluster-secret-of-the-e2e-rig"
DRAIN_TIMEOUT = 20.0
HEARTBEAT = 2.0  # replica and host lease renewals
REPLICA_TTL = 15.0  # a killed replica's rows go this long after its last renewal (the default)
FIRST, SECOND = b"x" * 20_000, b"y" * 20_000
BACKENDS = ("devyard_replicas", "devyard_link_ports")
#: Backends whose servers track devyard_replicas' (their state, maintenance included, follows)
TRACKING = ("devyard_replicas_writes",)


def wait_for(condition: Callable[[], object], seconds: float, what: str) -> None:
    """Poll a synchronous *condition* (fixture set-up, outside trio)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.05)


def readyz(url: str) -> dict[str, Any] | None:
    """The replica's /readyz body when it answers 200, else None."""
    try:
        ready = httpx.get(f"{url}/readyz", timeout=2)
    except httpx.HTTPError:
        return None
    body: dict[str, Any] = ready.json() if ready.status_code == 200 else {}
    return body or None


@attrs.define
class Proc:
    """One long-running child process, its output in a log file."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(  # stopped by `stop` (the fixture's teardown)
                self.argv, env=self.env, stdout=out, stderr=out, stdin=subprocess.DEVNULL
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@attrs.define
class Replica:
    name: str  # r1, r2, r3: its replica id and its server name in HAProxy
    data_dir: Path
    api: str  # host:port
    link: str  # host:port of the raw link port (peers dial it)
    proc: Proc

    @property
    def url(self) -> str:
        return f"http://{self.api}"

    def links(self) -> dict[str, int]:
        """Its host and connector link counts (peer links left out)."""
        body = readyz(self.url)
        links = {} if body is None else dict(body.get("links", {}))
        return {kind: links.get(kind, 0) for kind in ("host", "connector")}


@attrs.define
class Host:
    host_id: str
    capacity: int
    proc: Proc


class PrivateHTTP(http.server.ThreadingHTTPServer):
    """The tunnel's private service: ``/`` answers FIRST + SECOND at once; ``/slow`` sends FIRST,
    sets `sent`, and the rest once `release` is set (a stream in flight across a drain)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__((PRIVATE, 0), _PrivateHandler)
        self.sent = threading.Event()
        self.release = threading.Event()

    @property
    def address(self) -> str:
        return f"{PRIVATE}:{self.server_address[1]}"


class _PrivateHandler(http.server.BaseHTTPRequestHandler):
    server: PrivateHTTP

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(FIRST) + len(SECOND)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(FIRST)
        self.wfile.flush()
        if self.path == "/slow":
            self.server.sent.set()
            self.server.release.wait(60)
        self.wfile.write(SECOND)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@attrs.define
class Rig:
    tmp: Path
    database_url: str
    key: str
    lb: str  # http://host:port, also every replica's public_url
    lb_links: str  # host:port of HAProxy's raw link front
    admin: Path  # HAProxy's runtime API socket
    haproxy_proc: Proc
    replicas: dict[str, Replica]
    hosts: list[Host]
    connectors: list[Proc]
    tunnel: str  # its name
    tunnel_id: str
    private: PrivateHTTP

    # ---- HAProxy ------------------------------------------------------------------------------

    def haproxy(self, command: str) -> str:
        return haproxy_command(self.admin, command)

    def up_in_haproxy(self, server: str) -> bool:
        """Whether HAProxy sends traffic to *server* in every backend."""
        return haproxy_up(self.admin, server)

    @contextmanager
    def only(self, name: str) -> Iterator[None]:
        """HAProxy sends new connections to replica *name* alone for the block."""
        others = [r for r in self.replicas if r != name]
        for other in others:
            for backend in BACKENDS:
                self.haproxy(f"disable server {backend}/{other}")
        try:
            yield
        finally:
            for other in others:
                for backend in BACKENDS:
                    self.haproxy(f"enable server {backend}/{other}")

    # ---- the cluster's tables -----------------------------------------------------------------

    def query(self, text: str, *params: object) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return list(conn.execute(text, params).fetchall())

    def holder(self, kind: str, key: str) -> str | None:
        """The replica that holds link *kind*/*key* (link_holders, live replicas only)."""
        rows = self.query(
            "SELECT h.replica_id FROM link_holders h JOIN cluster_replicas r"
            " ON r.replica_id = h.replica_id AND r.expires_at > now()"
            " WHERE h.kind = %s AND h.key = %s",
            kind,
            key,
        )
        return str(rows[0][0]) if rows else None

    def live_replicas(self) -> set[str]:
        rows = self.query("SELECT replica_id FROM cluster_replicas WHERE expires_at > now()")
        return {str(r[0]) for r in rows}


def _self_signed(where: Path) -> Path:
    """A certificate and key in one PEM, as HAProxy's ``crt`` takes them."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    pem = where / "lb.pem"
    pem.write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    return pem


def lb_env(tmp: Path, **addresses: str) -> dict[str, str]:
    """The environment deploy/haproxy/haproxy.cfg reads: free ports for its fronts and for
    three replicas, *addresses* (``DEVYARD_R1_API=...``) overriding them. A replica nobody
    runs stands down in HAProxy and is never chosen."""
    env = {
        "DEVYARD_LB_HTTP": f"127.0.0.1:{free_port()}",
        "DEVYARD_LB_HTTPS": f"127.0.0.1:{free_port()}",
        "DEVYARD_LB_CERT": str(_self_signed(tmp)),
        "DEVYARD_LB_LINKS": f"127.0.0.1:{free_port()}",
        "DEVYARD_LB_STATS": f"127.0.0.1:{free_port()}",
        "DEVYARD_LB_ADMIN": str(tmp / "haproxy.sock"),
    }
    for n in (1, 2, 3):
        env[f"DEVYARD_R{n}_API"] = f"127.0.0.1:{free_port()}"
        env[f"DEVYARD_R{n}_LINK"] = f"127.0.0.1:{free_port()}"
    env.update(addresses)
    for n in (1, 2, 3):
        env[f"DEVYARD_R{n}_API_PORT"] = env[f"DEVYARD_R{n}_API"].rsplit(":", 1)[1]
    return env


def haproxy_command(admin: Path, command: str) -> str:
    """*command* on HAProxy's runtime API socket *admin*: its whole answer."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(admin))
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def haproxy_up(admin: Path, server: str) -> bool:
    """Whether HAProxy sends traffic to *server* in every backend of the reference config."""
    states = haproxy_command(admin, "show servers state")
    rows = [line.split() for line in states.splitlines() if f" {server} " in line]
    # srv_op_state (the 6th column) 2 = running, srv_admin_state (7th) 0 = enabled
    wanted = len(BACKENDS) + len(TRACKING)
    return len(rows) == wanted and all(r[5] == "2" and r[6] == "0" for r in rows)


async def bootstrap_key(url: str) -> str:
    async with open_store(url) as store:  # migrates the database too
        made = await bootstrap_organization(store, org_name="acme")
    return made.plaintext_key


def _replica(name: str, tmp: Path, common: dict[str, str]) -> Replica:
    data_dir, api = tmp / name, f"127.0.0.1:{free_port()}"
    link = f"127.0.0.1:{free_port()}"
    env = {**common, "DEVYARD_CLUSTER_PEER_URL": f"tcp://{link}"}
    args = ["server", "--data-dir", str(data_dir), "--replica-id", name]
    args += ["--listen", api, "--link-listen", link]
    return Replica(name, data_dir, api, link, Proc([*DEVYARD, *args], env, tmp / f"{name}.log"))


def _admin_host_token(data_dir: Path, env: dict[str, str]) -> tuple[str, str]:
    """A host id and token made by ``devyard admin host-token`` in the shared table."""
    made = subprocess.run(
        [*DEVYARD, "admin", "host-token", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    first, token = made.stdout.strip().splitlines()[-2:]
    host_id = first.removeprefix("host ").split(";", 1)[0]
    assert host_id.startswith("host_") and token, made.stdout
    return host_id, token


def start_replica(replica: Replica) -> None:
    replica.proc.start()


@contextmanager
def open_rig(
    database_url: str, tmp: Path, *, capacity: int, drain_timeout: float = DRAIN_TIMEOUT
) -> Iterator[Rig]:
    """The whole cluster, up and linked as the module docstring says; everything stopped at
    the end (processes this rig started, by their handles)."""
    if HAPROXY is None:
        raise LookupError("haproxy missing (scripts/deps)")
    key = trio.run(bootstrap_key, database_url)
    lb_http = f"127.0.0.1:{free_port()}"
    common = clean_env(
        DEVYARD_DATABASE_URL=database_url,
        DEVYARD_PUBLIC_URL=f"http://{lb_http}",
        DEVYARD_DRAIN_TIMEOUT=str(drain_timeout),
        DEVYARD_SHUTDOWN_GRACE="2",
        DEVYARD_RATE_LIMIT_ENABLED="false",  # 500 creates from one key in a second or two
        DEVYARD_CLUSTER_ENABLED="true",
        DEVYARD_CLUSTER_HEARTBEAT_S=str(HEARTBEAT),
        DEVYARD_CLUSTER_REPLICA_TTL_S=str(REPLICA_TTL),
        DEVYARD_CLUSTER_REFRESH_S="2",
        DEVYARD_PEERS_CLUSTER_SECRET=SECRET,
    )
    replicas = {name: _replica(name, tmp, common) for name in ("r1", "r2", "r3")}
    addresses: dict[str, str] = {}
    for n, replica in enumerate(replicas.values(), start=1):
        addresses |= {f"DEVYARD_R{n}_API": replica.api, f"DEVYARD_R{n}_LINK": replica.link}
    haproxy_env = {**lb_env(tmp, **addresses), "DEVYARD_LB_HTTP": lb_http}
    lb = f"http://{lb_http}"
    made = [_admin_host_token(tmp / "admin", common) for _ in range(2)]
    haproxy = Proc(
        [HAPROXY, "-db", "-f", str(HAPROXY_CFG)],
        {**clean_env(), **haproxy_env},
        tmp / "haproxy.log",
    )
    private = PrivateHTTP()
    threading.Thread(target=private.serve_forever, daemon=True).start()
    started: list[Proc] = []
    t0 = time.monotonic()
    try:
        for replica in replicas.values():
            replica.proc.start()
            started.append(replica.proc)
        wait_for(
            lambda: all(readyz(r.url) for r in replicas.values()), 240, "the replicas' /readyz"
        )
        print(f"rig: replicas ready at {time.monotonic() - t0:.1f} s")
        haproxy.start()
        started.append(haproxy)
        admin = Path(haproxy_env["DEVYARD_LB_ADMIN"])
        wait_for(admin.exists, 10, "haproxy's runtime API")
        with httpx.Client(
            base_url=lb, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            tunnel = http.post(
                "/v1/tunnels", json={"name": "office", "selectors": [private.address]}
            )
            assert tunnel.status_code == 200, tunnel.text
        (tmp / "tunnel-token").write_text(tunnel.json()["token"])
        rig = Rig(
            tmp, database_url, key, lb, haproxy_env["DEVYARD_LB_LINKS"], admin, haproxy, replicas,
            [], [], "office", tunnel.json()["id"], private,
        )  # fmt: skip
        wait_for(lambda: all(rig.up_in_haproxy(r) for r in replicas), 20, "haproxy's checks")
        # r1: host 1 and both connectors (the second a standby); r2: host 2; r3: nothing
        for n, ((host_id, token), name) in enumerate(zip(made, ("r1", "r2"), strict=True), 1):
            (tmp / f"host-token-{n}").write_text(token)
            hostd = ["hostd", "--server", lb, "--token-file", str(tmp / f"host-token-{n}")]
            hostd += ["--region", "local", "--data-dir", str(tmp / f"hostd-{n}")]
            hostd += ["--capacity", str(capacity), "--link", f"tcp://{rig.lb_links}"]
            connector = ["connector", "run", "--server", lb]
            connector += ["--token-file", str(tmp / "tunnel-token")]
            connector += ["--link", f"tcp://{rig.lb_links}"]
            host = Host(
                host_id, capacity, Proc([*DEVYARD, *hostd], clean_env(), tmp / f"hostd-{n}.log")
            )
            conn = Proc([*DEVYARD, *connector], clean_env(), tmp / f"connector-{n}.log")
            with rig.only(name):  # each link dialled while only its replica takes it
                host.proc.start()
                started.append(host.proc)
                rig.hosts.append(host)
                wait_for(lambda r=replicas[name]: r.links()["host"] == 1, 60, f"host {n}")  # type: ignore[misc]
            with rig.only("r1"):
                conn.start()
                started.append(conn)
                rig.connectors.append(conn)
                wait_for(lambda c=n: replicas["r1"].links()["connector"] == c, 60, f"connector {n}")  # type: ignore[misc]
        wanted = {"r1": {"host": 1, "connector": 2}, "r2": {"host": 1, "connector": 0}}
        wait_for(
            lambda: all(replicas[name].links() == links for name, links in wanted.items()),
            20,
            f"the placement {wanted}",
        )
        wait_for(lambda: all(rig.up_in_haproxy(r) for r in replicas), 20, "haproxy's checks")
        print(f"rig: up at {time.monotonic() - t0:.1f} s")
        yield rig
    finally:
        for proc in reversed(started):
            with suppress(OSError):
                proc.stop()
        private.shutdown()
        private.server_close()
