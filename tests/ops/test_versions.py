"""Versions (core/versions.py): ``devyard --version``; the server's version in ``registered``;
a host daemon or connector older than the server takes is refused for good, and the real
``devyard hostd`` / ``devyard connector`` exit with their own code and say why."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from devyard import __version__
from devyard.core import Backoff, ControlChannel, Session, UpgradeRequest
from devyard.core.link import PROTO, LinkRefused, run_link
from devyard.core.versions import MIN_PEER_VERSION, parse_version, peer_refusal
from devyard.server.api.serve import BoundServer
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import serve_server
from tests.core.linkpeer import open_link_peer, register
from tests.e2e._cli import DEVYARD, clean_env


def test_versions_parse_and_compare() -> None:
    assert parse_version("0.1.0") == (0, 1, 0)
    assert parse_version("1.2") == (1, 2, 0)
    assert parse_version("1.2.3rc1+local") == (1, 2, 3)
    assert parse_version("dev") is None
    assert peer_refusal({"role": "host", "version": MIN_PEER_VERSION}) is None
    assert peer_refusal({"role": "host"}) is None, "no version: proto is the gate"
    too_old = peer_refusal({"role": "connector", "version": "0.0.9"})
    assert too_old is not None and "0.0.9" in too_old and "upgrade the connector" in too_old


def test_devyard_version() -> None:
    done = subprocess.run(
        [*DEVYARD, "--version"], capture_output=True, text=True, check=False, env=clean_env()
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"devyard {__version__}")


def _hello(version: str) -> dict[str, Any]:
    return {
        "type": "hello",
        "proto": PROTO,
        "role": "host",
        "id": "h",
        "version": version,
        "hostname": "h",
        "region": "local",
        "capacity": 1,
        "platforms": ["ios"],
        "drivers": ["virtual"],
        "instances": [],
    }


async def test_the_edge_refuses_an_old_peer_for_good_and_names_itself_to_a_current_one(
    tmp_path: Path,
) -> None:
    _, token = create_host_token(tmp_path / HOST_TOKENS_FILE)
    config = ServerConfig(data_dir=tmp_path, listen=ListenAddress("127.0.0.1", 0))
    registered: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(serve_server, config)
        url = bound.local_url.replace("http://", "ws://") + "/v1/host_connections"

        async def link(version: str) -> None:
            shutdown = trio.Event()

            async def body(session: Session, control: ControlChannel, reply: Any) -> None:
                registered.append(reply)
                shutdown.set()
                await trio.lowlevel.checkpoint()

            await run_link(
                url,
                token,
                partial(_hello, version),
                body,
                backoff=Backoff(base=0.05),
                shutdown=shutdown,
            )

        with trio.fail_after(30):
            with pytest.raises(LinkRefused) as refused:
                await link("0.0.1")
            assert refused.value.permanent and refused.value.code == "version-unsupported"
            assert "0.0.1" in refused.value.message and __version__ in refused.value.message
            await link(__version__)
        nursery.cancel_scope.cancel()
    assert registered[0]["server_version"] == __version__


async def _refuse_as_too_old(peer: Any, number: int, request: UpgradeRequest) -> None:
    error = {
        "type": "error",
        "code": "version-unsupported",
        "message": "this devyard peer is version 0.1.0; the server (9.0.0) takes 9.0.0 or newer",
        "permanent": True,
    }

    async def wait(session: Session, control: ControlChannel) -> None:
        await session.wait_ended()

    await register(peer, request, error, wait)


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["hostd", "--server", "http://unused.invalid", "--region", "r"], 4),
        (["connector", "run", "--server", "http://unused.invalid"], 17),
    ],
)
async def test_a_too_old_hostd_or_connector_exits_with_its_code_and_says_why(
    tmp_path: Path, command: list[str], code: int
) -> None:
    token = tmp_path / "token"
    token.write_text("dyh_x_y\n")
    async with open_link_peer(lambda n, r: _refuse_as_too_old(peer, n, r)) as peer:
        argv = [*DEVYARD, *command, "--link", f"tcp://127.0.0.1:{peer.port}"]
        argv += ["--token-file", str(token)]
        if command[0] == "hostd":
            argv += ["--data-dir", str(tmp_path / "host")]
        with trio.fail_after(60):
            done = await trio.run_process(
                argv,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=clean_env(),
                cwd=tmp_path,
            )
    err = done.stderr.decode()
    assert done.returncode == code, err
    assert "version-unsupported" in err and "9.0.0" in err
    assert "Traceback" not in err
    assert peer.connections == 1, "a refusal for good is not retried"
