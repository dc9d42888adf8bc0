"""Issue 14 findings 1 and 7 against ``devyard up`` (real processes): one organization's device
reaches neither the host's services nor another organization's tunnel, and the host fetches no
initial app from them.

Two organizations on one ``devyard up`` (server and host daemon): each has a tunnel held by a
real ``devyard connector`` to its own private HTTP server (127.0.0.2 for A, 127.0.0.4 for B),
and an Android instance on it. From A's device (``POST {apiUrl}/shell``): scanning the host's
loopback ports (the control API, the raw link port, B's egress proxy, a closed port) through
its own proxy and directly, pointing its proxy setting at B's proxy, and ``nc`` to B's proxy
with a CONNECT: all refused, with the same answer for open and closed ports, and B's private
server never hit. A's own tunnel still works, and so does B's.
"""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from tests.ports import free_port

from ._cli import DEVYARD, Running, clean_env, run, start

pytestmark = pytest.mark.slow


@attrs.define
class Private:
    """A private HTTP server that counts the requests it answered."""

    name: bytes
    hits: int = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                data += chunk
            self.hits += 1
            body = self.name + b" private\n"
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(body), body)
            )


@attrs.define
class Org:
    http: httpx.AsyncClient
    private: Private
    private_port: int
    instance: dict[str, Any] = attrs.field(factory=dict)

    async def shell(self, command: str) -> dict[str, Any]:
        status = self.instance["status"]
        headers = {"Authorization": f"Bearer {status['token']}"}
        async with httpx.AsyncClient(headers=headers, timeout=60) as client:
            response = await client.post(status["apiUrl"] + "/shell", json={"command": command})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        while True:  # until the companion host daemon has registered there is no capacity
            created = await self.http.post(
                "/v1/android_instances", params={"wait": "true"}, json={"spec": spec}
            )
            if created.status_code != 409:
                assert created.status_code == 200, created.text
                instance: dict[str, Any] = created.json()
                return instance
            await trio.sleep(0.1)


async def _tunnel(org: Org, name: str, host: str, url: str, tmp: Path) -> trio.Process:
    created = await org.http.post(
        "/v1/tunnels", json={"name": name, "selectors": [f"{host}:{org.private_port}"]}
    )
    assert created.status_code == 200, created.text
    token_file = tmp / f"{name}-token"
    token_file.write_text(created.json()["token"])
    process = await trio.lowlevel.open_process(
        [*DEVYARD, "connector", "run", "--server", url, "--token-file", str(token_file)],
        env=clean_env(),
    )
    online = {"status": "online"}.items()
    while not online <= (await org.http.get(f"/v1/tunnels/{name}")).json().items():  # noqa: ASYNC110 - another process's state
        await trio.sleep(0.05)
    return process


@asynccontextmanager
async def _two_orgs(tmp_path: Path) -> AsyncIterator[tuple[Org, Org, int, int, Running]]:
    data = tmp_path / "data"
    link_port = free_port()
    env = clean_env(DEVYARD_LINK_LISTEN=f"127.0.0.1:{link_port}")
    async with trio.open_nursery() as nursery:
        a_private, b_private = Private(b"A"), Private(b"B")
        ports = []
        for private, host in ((a_private, "127.0.0.2"), (b_private, "127.0.0.4")):
            listeners = await nursery.start(partial(trio.serve_tcp, private.handle, 0, host=host))
            ports.append(int(listeners[0].socket.getsockname()[1]))
        up = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        api_port = int(url.rsplit(":", 1)[1])
        a_key = (data / "admin-api-key").read_text().strip()
        beta = await run(
            ["admin", "bootstrap", "--data-dir", str(data), "--org", "beta"], env, tmp_path
        )
        assert beta.returncode == 0, beta.stderr
        b_key = beta.stdout.decode().splitlines()[-1]
        processes: list[trio.Process] = []
        try:
            async with (
                httpx.AsyncClient(base_url=url, headers=_bearer(a_key), timeout=60) as a_http,
                httpx.AsyncClient(base_url=url, headers=_bearer(b_key), timeout=60) as b_http,
            ):
                a = Org(a_http, a_private, ports[0])
                b = Org(b_http, b_private, ports[1])
                processes.append(await _tunnel(a, "a-net", "127.0.0.2", url, tmp_path))
                processes.append(await _tunnel(b, "b-net", "127.0.0.4", url, tmp_path))
                yield a, b, api_port, link_port, up
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            assert await up.stop(signal.SIGTERM) == 0
            for process in processes:
                await process.wait()
            nursery.cancel_scope.cancel()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_device_reaches_neither_the_host_nor_another_organizations_tunnel(
    tmp_path: Path,
) -> None:
    with trio.fail_after(180):
        async with _two_orgs(tmp_path) as (a, b, api_port, link_port, _):
            a.instance = await a.create({"tunnel": "a-net"})
            b.instance = await b.create({"tunnel": "b-net"})
            assert a.instance["status"]["state"] == "ready", a.instance
            assert b.instance["status"]["state"] == "ready", b.instance
            a_proxy = (await a.shell("settings get global http_proxy"))["stdout"].strip()
            b_proxy = (await b.shell("settings get global http_proxy"))["stdout"].strip()
            b_proxy_port = int(b_proxy.rsplit(":", 1)[1])

            # Both tunnels work.
            ok_a = await a.shell(f"curl -sS http://127.0.0.2:{a.private_port}/")
            assert ok_a == {"stdout": "A private\n", "stderr": "", "exitCode": 0}
            ok_b = await b.shell(f"curl -sS http://127.0.0.4:{b.private_port}/")
            assert ok_b == {"stdout": "B private\n", "stderr": "", "exitCode": 0}
            assert (a.private.hits, b.private.hits) == (1, 1)

            # A scans the host through its own proxy: the same refusal for every port.
            closed = free_port()
            mapped = "[::ffff:127.0.0.1]"  # the host's loopback (127.0.0.1 is the device's own)
            targets = [
                f"{mapped}:{api_port}", f"{mapped}:{link_port}", f"{mapped}:{b_proxy_port}",
                f"{mapped}:{closed}", f"0.0.0.0:{api_port}", f"127.0.0.4:{b.private_port}",
            ]  # fmt: skip
            answers = set()
            for target in targets:
                result = await a.shell(f"curl -sS -m 10 http://{target}/v1/android_instances")
                answers.add((result["exitCode"], result["stdout"], result["stderr"]))
            assert answers == {
                (
                    56,
                    "",
                    "curl: (56) Received HTTP code 403 from proxy after CONNECT: not allowed\n",
                )
            }

            # Directly (no proxy setting): 127.0.0.1 is the device's own loopback (nothing
            # listens there), never the host's; other host addresses are refused.
            await a.shell("settings delete global http_proxy")
            ports = (api_port, link_port, b_proxy_port, closed)
            for target in [*(f"127.0.0.1:{port}" for port in ports), *targets]:
                result = await a.shell(f"curl -sS -m 10 http://{target}/")
                assert (result["exitCode"], result["stdout"]) == (7, ""), (target, result)
                host = target.rsplit(":", 1)[0].strip("[]")
                why = "Connection refused" if host == "127.0.0.1" else "not allowed by the host's"
                assert re.fullmatch(
                    rf"curl: \(7\) Failed to connect to {re.escape(host)} port \d+: {why}.*\n",
                    result["stderr"],
                ), result
            connect = f"CONNECT 127.0.0.4:{b.private_port} HTTP/1.0"
            nc = await a.shell(f"echo '{connect}' | nc -w 5 127.0.0.1 {b_proxy_port}")
            assert nc["exitCode"] == 1 and "refused" in nc["stderr"], nc
            # With the setting pointed at B's proxy: a host loopback dial, refused.
            await a.shell(f"settings put global http_proxy {b_proxy}")
            stolen = await a.shell(f"curl -sS -m 10 http://127.0.0.4:{b.private_port}/")
            assert stolen["exitCode"] == 7 and "not allowed" in stolen["stderr"], stolen
            assert b.private.hits == 1  # B's private server never saw A

            # A's own tunnel still works once its setting is back; B's too.
            await a.shell(f"settings put global http_proxy {a_proxy}")
            again = await a.shell(f"curl -sS http://127.0.0.2:{a.private_port}/")
            assert again["stdout"] == "A private\n", again
            assert (await b.shell(f"curl -sS http://127.0.0.4:{b.private_port}/"))["exitCode"] == 0


async def test_the_host_fetches_no_initial_app_from_private_addresses(tmp_path: Path) -> None:
    with trio.fail_after(180):
        async with _two_orgs(tmp_path) as (a, _, _, link_port, _):
            messages = set()
            for url in [
                f"http://127.0.0.1:{link_port}/app.apk",  # the raw link port: open
                f"http://127.0.0.1:{free_port()}/app.apk",  # closed
                f"http://127.0.0.2:{a.private_port}/app.apk",  # a private server
                "http://169.254.169.254/latest/meta-data/app.apk",
            ]:
                entry = {"kind": "App", "source": "URL", "url": url}
                instance = await a.create({"initialAssets": [entry]})
                status = instance["status"]
                assert status["state"] == "terminated", instance
                messages.add(re.sub(r"'[^']*'", "'NAME'", status["errorMessage"]))
            assert messages == {"could not fetch the initial asset 'NAME' (not-allowed)"}
            assert a.private.hits == 0
