"""Operating several server replicas (issue 23, "Operate it"), with real processes on loopback.

Two ``devyard server`` replicas on one PostgreSQL, Debian's HAProxy in front of them with the
reference config (deploy/haproxy/haproxy.cfg, its addresses from the environment), a real host
daemon (WebSocket link through HAProxy's HTTP front) and a real connector (raw link through its
TCP passthrough). The processes of the cluster start once for the module.

Assumption while replicas do not forward to each other yet (issue 23's forwarding): the host
and the connector are linked to replica A when the drain starts (replica B is taken out of
HAProxy by its runtime API while they link), and the instance is created on A and driven on A,
so the tunnel stream in flight stays on one replica. Host tokens live in the data dir: B gets
a copy of A's file.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from devyard.core.link import MOVE_OVERLAP
from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.server.api.serve import BoundServer
from devyard.server.config import ConfigError, ListenAddress, ServerConfig, load_server_config
from devyard.server.drain import Drain, ensure_replica_id
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import serve_server
from devyard.server.store.pgcluster import TemporaryCluster
from tests.polling import until

from ._cli import clean_env
from ._replica_rig import bootstrap_key, haproxy_command, haproxy_up, lb_env

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
KUBERNETES = ROOT / "deploy" / "kubernetes"
HAPROXY = shutil.which("haproxy") or next(
    (p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None
)
DEVYARD = [sys.executable, "-m", "devyard"]
DRAIN_TIMEOUT = 20.0
PRIVATE = "127.0.0.2"
FIRST, SECOND = b"x" * 20_000, b"y" * 20_000

needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy missing (scripts/deps)")


@needs_haproxy
def test_the_reference_haproxy_config_is_valid(tmp_path: Path) -> None:
    assert HAPROXY is not None
    env = {**clean_env(), **lb_env(tmp_path)}
    checked = subprocess.run(
        [HAPROXY, "-c", "-f", str(HAPROXY_CFG)], env=env, capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stderr.decode()
    # the check can fail: a certificate that is not there is an error
    env["DEVYARD_LB_CERT"] = str(tmp_path / "missing.pem")
    broken = subprocess.run(
        [HAPROXY, "-c", "-f", str(HAPROXY_CFG)], env=env, capture_output=True, check=False
    )
    assert broken.returncode != 0


def test_the_kubernetes_manifests_pass_the_linter(tmp_path: Path) -> None:
    """kubernetes-validate (bundled schemas, strict: unknown fields are errors)."""
    validate = pytest.importorskip("kubernetes_validate")
    manifests = sorted(KUBERNETES.glob("*.yaml"))
    kinds = set()
    import yaml  # noqa: PLC0415

    for path in manifests:
        for document in yaml.safe_load_all(path.read_text()):
            validate.validate(document, validate.latest_version(), strict=True)
            kinds.add(document["kind"])
    assert {"Deployment", "Service", "Secret", "PodDisruptionBudget"} <= kinds
    deployment = yaml.safe_load((KUBERNETES / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert server["livenessProbe"]["httpGet"]["path"] == "/livez"
    config = (KUBERNETES / "configmap.yaml").read_text()
    drain = float(config.split("drain_timeout = ")[1].split()[0])
    grace = float(config.split("shutdown_grace = ")[1].split()[0])
    pre_stop = server["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + drain + grace
    # the linter fails on a typo
    broken = dict(deployment, spec={**deployment["spec"], "replica": 3})
    with pytest.raises(validate.ValidationError):
        validate.validate(broken, validate.latest_version(), strict=True)


def test_the_replica_id_is_configured_or_made_once_and_kept(tmp_path: Path) -> None:
    config = load_server_config(flags={"data_dir": str(tmp_path / "data")})
    assert config.replica_id is None
    assert config.drain_timeout == 30.0
    made = ensure_replica_id(config)
    assert re.fullmatch(r"r-[0-9a-f]{12}", made)
    assert ensure_replica_id(config) == made  # a restart keeps it
    assert (tmp_path / "data" / "replica-id").read_text().strip() == made
    named = load_server_config(
        flags={"data_dir": str(tmp_path / "data"), "replica_id": "pod-7.eu"},
        env={"DEVYARD_DRAIN_TIMEOUT": "5"},
    )
    assert ensure_replica_id(named) == "pod-7.eu"
    assert named.drain_timeout == 5.0
    for bad in ("two words", "-dash-first", "x" * 64):
        with pytest.raises(ConfigError, match="replica_id"):
            load_server_config(flags={"data_dir": str(tmp_path), "replica_id": bad})


async def test_a_lone_server_drains_its_host_and_stops_within_seconds(tmp_path: Path) -> None:
    """No other replica: the host's new link is refused (503 draining), so its old link
    waits MOVE_OVERLAP for it, then closes; the server then stops. In process: cheap."""
    config = ServerConfig(
        data_dir=tmp_path / "server", listen=ListenAddress("127.0.0.1", 0), replica_id="solo"
    )
    _, host_token = create_host_token(config.data_dir / HOST_TOKENS_FILE)
    hostd = HostdConfig(
        server_url="",
        token=host_token,
        region=config.region,
        data_dir=tmp_path / "host",
        backoff_base=0.05,
    )
    stop_server, stop_host, stopped = trio.Event(), trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:

        async def server(task_status: trio.TaskStatus[BoundServer]) -> None:
            await serve_server(config, shutdown_trigger=stop_server.wait, task_status=task_status)
            stopped.set()

        bound: BoundServer = await nursery.start(server)
        hostd = attrs.evolve(hostd, server_url=bound.local_url)
        nursery.start_soon(partial(serve_hostd, hostd, shutdown=stop_host))
        async with httpx.AsyncClient(base_url=bound.local_url, timeout=10) as http:

            async def linked() -> bool:
                body = (await http.get("/readyz")).json()
                return bool(body["links"] == {"host": 1, "connector": 0})

            await until(linked, 20)
            assert (await http.get("/readyz")).json()["replica"] == "solo"
            started = trio.current_time()
            stop_server.set()

            async def draining() -> bool:
                return (await http.get("/readyz")).status_code == 503

            await until(draining, 5)
            refused = await http.get("/v1/regions")
            assert refused.status_code == 503, refused.text
            assert refused.json()["reason"] == "draining"
            with trio.fail_after(MOVE_OVERLAP + 5):
                await stopped.wait()
        took = trio.current_time() - started
        assert took < MOVE_OVERLAP + 5, took
        print(f"a lone server drained and stopped in {took:.2f} s")
        stop_host.set()


async def test_a_drain_waits_for_host_and_connector_links_but_not_for_peer_links(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Other replicas keep their peer links here open while idle: a drain that waited for them
    would always run to its timeout. It ends when the hosts and connectors have moved."""
    drain = Drain("d", timeout=30)
    links = {kind: trio.Event() for kind in ("peer", "host", "connector")}

    def link(kind: str) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await links[kind].wait()

        return partial(drain.guard_asgi(kind, app), {"type": "websocket"}, None, None)

    done = trio.Event()

    async def run() -> None:
        await drain.run([])
        done.set()

    async with trio.open_nursery() as nursery:
        for kind in links:
            nursery.start_soon(link(kind))
        await trio.testing.wait_all_tasks_blocked()
        assert drain.link_counts() == {"connector": 1, "host": 1, "peer": 1}
        nursery.start_soon(run)
        await trio.sleep(5)
        assert not done.is_set()  # a host and a connector still here
        links["host"].set()
        links["connector"].set()
        with trio.fail_after(1):
            await done.wait()
        assert trio.current_time() < 6  # not the 30 s timeout
        assert drain.link_counts() == {"peer": 1}  # ends with the process
        links["peer"].set()


# ---- the cluster ----------------------------------------------------------------------------


@attrs.define
class Replica:
    name: str
    data_dir: Path
    api: str  # host:port
    link: str
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.api}"

    def start(self, log: Path) -> None:
        args = ["server", "--data-dir", str(self.data_dir), "--replica-id", self.name]
        args += ["--listen", self.api, "--link-listen", self.link]
        with log.open("ab") as out:
            self.process = subprocess.Popen(  # stopped by the module fixture
                [*DEVYARD, *args], env=self.env, stdout=out, stderr=out, stdin=subprocess.DEVNULL
            )


@attrs.define
class Cluster:
    a: Replica
    b: Replica
    lb: str  # http://host:port
    lb_links: str  # host:port
    admin: Path  # HAProxy's runtime API
    key: str
    tmp: Path

    def haproxy(self, command: str) -> str:
        return haproxy_command(self.admin, command)

    def up_in_haproxy(self, server: str) -> bool:
        """Whether HAProxy sends traffic to *server* (r1, r2) in its three backends (API,
        API writes, raw links)."""
        return haproxy_up(self.admin, server)


def _wait(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def cluster(
    postgres_cluster: TemporaryCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    if HAPROXY is None:
        pytest.skip("haproxy missing (scripts/deps)")
    tmp = tmp_path_factory.mktemp("replicas")
    haproxy_env = lb_env(tmp)
    lb = f"http://{haproxy_env['DEVYARD_LB_HTTP']}"
    common = clean_env(
        DEVYARD_DATABASE_URL=postgres_cluster.create_schema(),
        DEVYARD_PUBLIC_URL=lb,
        DEVYARD_DRAIN_TIMEOUT=str(DRAIN_TIMEOUT),
        DEVYARD_SHUTDOWN_GRACE="2",
    )
    a = Replica(
        "a", tmp / "a", haproxy_env["DEVYARD_R1_API"], haproxy_env["DEVYARD_R1_LINK"], common
    )
    b = Replica(
        "b", tmp / "b", haproxy_env["DEVYARD_R2_API"], haproxy_env["DEVYARD_R2_LINK"], common
    )
    key = trio.run(bootstrap_key, common["DEVYARD_DATABASE_URL"])  # migrates the database too
    haproxy = None
    try:
        b.data_dir.mkdir(mode=0o700)
        a.start(tmp / "a.log")  # together: the bootstrap migrated the database
        b.start(tmp / "b.log")
        _wait(lambda: _ready(a.url) and _ready(b.url), 90, "the replicas")
        with (tmp / "haproxy.log").open("ab") as out:
            haproxy = subprocess.Popen(  # stopped below
                [HAPROXY, "-db", "-f", str(HAPROXY_CFG)],
                env={**clean_env(), **haproxy_env},
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
            )
        admin = Path(haproxy_env["DEVYARD_LB_ADMIN"])
        result = Cluster(a, b, lb, haproxy_env["DEVYARD_LB_LINKS"], admin, key, tmp)
        _wait(admin.exists, 10, "haproxy's runtime API")
        _wait(lambda: result.up_in_haproxy("r1") and result.up_in_haproxy("r2"), 20, "checks")
        yield result
    finally:
        for process in (haproxy, a.process, b.process):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.postgres
async def test_api_calls_through_haproxy_reach_both_replicas(cluster: Cluster) -> None:
    headers = {"Authorization": f"Bearer {cluster.key}"}
    fresh = httpx.Limits(max_keepalive_connections=0)  # each request balanced on its own
    async with httpx.AsyncClient(
        base_url=cluster.lb, headers=headers, timeout=10, limits=fresh
    ) as http:
        seen: set[str] = set()

        async def both_answered() -> bool:
            ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            body = ready.json()
            seen.add(body["replica"])
            assert body["links"] == {"host": 0, "connector": 0}
            assert body["checks"]["store"] == "ok"
            return seen == {"a", "b"}

        await until(both_answered, 20)  # HAProxy's slowstart ramps a new replica up
        for _ in range(4):  # the same state on either replica: one PostgreSQL
            listed = await http.get("/v1/tunnels")
            assert listed.status_code == 200, listed.text
            assert "x-request-id" in listed.headers  # HAProxy's id, kept by devyard
        created = await http.post("/v1/tunnels", json={"name": "ops", "selectors": ["a:1"]})
        assert created.status_code == 200, created.text
        for replica in (cluster.a, cluster.b):  # written through one, read on both
            direct = await http.get(f"{replica.url}/v1/tunnels/ops")
            assert direct.status_code == 200, direct.text


# ---- the drain ------------------------------------------------------------------------------


async def _slow_private_http(
    sent: trio.Event, release: trio.Event, stream: trio.SocketStream
) -> None:
    """Half the body (then *sent* is set), the rest once *release* is set: a stream in flight
    across the drain."""
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        await stream.send_all(head % (len(FIRST) + len(SECOND)) + FIRST)
        sent.set()
        await release.wait()
        await stream.send_all(SECOND)


async def _links(replica: Replica) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            ready = await http.get(f"{replica.url}/readyz")
        except httpx.HTTPError:
            return {}
    links: dict[str, int] = ready.json().get("links", {})
    return links


async def _shell(api_url: str, token: str, command: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as client:
        response = await client.post(api_url + "/shell", json={"command": command})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.mark.postgres
async def test_sigterm_drains_a_replica_without_dropping_a_tunnel_stream(
    cluster: Cluster,
) -> None:
    a, b, tmp = cluster.a, cluster.b, cluster.tmp
    headers = {"Authorization": f"Bearer {cluster.key}"}
    sent, release = trio.Event(), trio.Event()
    async with (
        httpx.AsyncClient(base_url=a.url, headers=headers, timeout=60) as on_a,
        trio.open_nursery() as nursery,
    ):
        try:
            listeners = await nursery.start(
                partial(trio.serve_tcp, partial(_slow_private_http, sent, release), 0, host=PRIVATE)
            )
        except OSError as exc:  # pragma: no cover - Linux routes 127.0.0.0/8 to lo
            pytest.skip(f"cannot listen on {PRIVATE}: {exc}")
        private = f"{PRIVATE}:{listeners[0].socket.getsockname()[1]}"

        # the host and the connector link through HAProxy while B is out of it: both on A
        for backend in ("devyard_replicas", "devyard_link_ports"):
            cluster.haproxy(f"disable server {backend}/r2")
        _, host_token = create_host_token(a.data_dir / HOST_TOKENS_FILE)
        shutil.copy(a.data_dir / HOST_TOKENS_FILE, b.data_dir / HOST_TOKENS_FILE)
        (tmp / "host-token").write_text(host_token)
        tunnel = await on_a.post("/v1/tunnels", json={"name": "office", "selectors": [private]})
        assert tunnel.status_code == 200, tunnel.text
        (tmp / "tunnel-token").write_text(tunnel.json()["token"])
        env = clean_env()
        hostd_args = ["--server", cluster.lb, "--token-file", str(tmp / "host-token")]
        hostd_args += ["--region", "local", "--data-dir", str(tmp / "hostd")]
        connector_args = ["--server", cluster.lb, "--token-file", str(tmp / "tunnel-token")]
        connector_args += ["--link", f"tcp://{cluster.lb_links}"]
        with (tmp / "hostd.log").open("ab") as out:
            hostd = await trio.lowlevel.open_process(
                [*DEVYARD, "hostd", *hostd_args, "--log-level", "debug"],
                env=env,
                stdout=out,
                stderr=out,
            )
        with (tmp / "connector.log").open("ab") as out:
            connector = await trio.lowlevel.open_process(
                [*DEVYARD, "connector", "run", *connector_args, "--log-level", "debug"],
                env=env,
                stdout=out,
                stderr=out,
            )
        try:

            async def linked_on_a() -> bool:
                return await _links(a) == {"host": 1, "connector": 1}

            await until(linked_on_a, 30)
            for backend in ("devyard_replicas", "devyard_link_ports"):
                cluster.haproxy(f"enable server {backend}/r2")
            await until(lambda: trio.to_thread.run_sync(cluster.up_in_haproxy, "r2"), 20)

            created = await on_a.post(
                "/v1/android_instances",
                params={"wait": "true"},
                json={"spec": {"tunnel": "office"}},
            )
            assert created.status_code == 200, created.text
            instance = created.json()
            token = instance["status"]["token"]
            api_on_a = instance["status"]["apiUrl"].replace(cluster.lb, a.url)
            assert api_on_a.startswith(a.url)

            # a fetch through the tunnel, in flight (half its body read) when A drains
            fetched: list[dict[str, Any]] = []

            async def fetch() -> None:
                command = f"curl -sS http://{private}/"
                fetched.append(await _shell(api_on_a, token, command))

            nursery.start_soon(fetch)
            with trio.fail_after(30):
                await sent.wait()

            assert a.process is not None
            signalled = trio.current_time()
            a.process.send_signal(signal.SIGTERM)

            async def moved_to_b() -> bool:
                return await _links(b) == {"host": 1, "connector": 1}

            await until(moved_to_b, 15)
            relinked = trio.current_time() - signalled
            draining = await on_a.get("/readyz")
            assert draining.status_code == 503
            assert draining.json()["reason"] == "draining"
            assert draining.headers.get("retry-after") is None  # readiness is a report
            refused = await on_a.get("/v1/tunnels")
            assert refused.status_code == 503 and refused.json()["reason"] == "draining"
            assert refused.headers["retry-after"] == "1"
            assert a.process.poll() is None  # the stream in flight holds A's old links

            release.set()  # the rest of the body crosses the old links on A
            with trio.fail_after(30):
                while not fetched:  # noqa: ASYNC110 - the fetch task appends its answer
                    await trio.sleep(0.02)
            assert fetched[0]["exitCode"] == 0, fetched[0]
            assert fetched[0]["stdout"] == (FIRST + SECOND).decode()

            code = await trio.to_thread.run_sync(a.process.wait, DRAIN_TIMEOUT + 5)
            drained = trio.current_time() - signalled
            assert code == 0
            assert drained < DRAIN_TIMEOUT, drained
            print(f"re-link {relinked:.2f} s, drain to exit {drained:.2f} s")

            # the tunnel works on B now: the host's and the connector's new links
            api_on_b = instance["status"]["apiUrl"].replace(cluster.lb, b.url)
            again = await _shell(api_on_b, token, f"curl -sS http://{private}/")
            assert again["exitCode"] == 0 and len(again["stdout"]) == len(FIRST + SECOND)
        finally:
            for process in (hostd, connector):
                process.send_signal(signal.SIGTERM)
            with trio.move_on_after(10):
                await hostd.wait()
                await connector.wait()
            with trio.CancelScope(shield=True):
                for process in (hostd, connector):
                    if process.returncode is None:
                        process.kill()
                    await process.wait()
            nursery.cancel_scope.cancel()
