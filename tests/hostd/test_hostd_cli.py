"""The real ``devyard admin host-token`` and ``devyard hostd`` as subprocesses against a server."""

from __future__ import annotations

import signal
import subprocess
from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.server.api.serve import BoundServer
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import Edge
from devyard.server.serve import serve_server
from tests.e2e._cli import DEVYARD, clean_env, run
from tests.polling import eventually

pytestmark = pytest.mark.slow


async def test_cli_host_token_and_hostd_register_and_stop(tmp_path: Path) -> None:
    server_dir = tmp_path / "server"
    env = clean_env()
    with trio.fail_after(60):
        made = await run(["admin", "host-token", "--data-dir", str(server_dir)], env, tmp_path)
    assert made.returncode == 0, made.stderr
    host_line, token = made.stdout.decode().splitlines()[:2]
    host_id = host_line.split()[1].rstrip(";")
    (tmp_path / "token").write_text(token + "\n")

    # A crashed host's sandbox, in a data dir readable by everyone (issue 14, finding 11).
    stale = tmp_path / "host" / "instances" / "android_crashed_1"
    stale.mkdir(parents=True)
    (stale / "state.json").write_text("{}")
    (tmp_path / "host").chmod(0o755)

    config = ServerConfig(data_dir=server_dir, listen=ListenAddress("127.0.0.1", 0))
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_server, config))
        edge = bound.hosts
        assert isinstance(edge, Edge)
        argv = [
            *DEVYARD, "hostd", "--server", bound.local_url, "--token-file",
            str(tmp_path / "token"), "--region", "eu", "--capacity", "3",
            "--data-dir", str(tmp_path / "host"), "--allow-network", "10.9.0.0/16",
        ]  # fmt: skip
        process = await trio.lowlevel.open_process(argv, env=env, stderr=subprocess.DEVNULL)
        try:
            await eventually(lambda: bool(edge.hosts()), seconds=30)
            (info,) = edge.hosts()
            assert (info.id, info.region, info.capacity) == (host_id, "eu", 3)
            assert not stale.exists()  # cleaned before the host registered
            for private in (tmp_path / "host", tmp_path / "host" / "instances"):
                assert private.stat().st_mode & 0o777 == 0o700, private
            process.send_signal(signal.SIGINT)
            with trio.fail_after(30):
                assert await process.wait() == 0
                await eventually(lambda: not edge.hosts(), seconds=30)
        finally:
            process.kill()
            await process.wait()
        nursery.cancel_scope.cancel()


async def test_cli_hostd_with_a_bad_token_exits_with_a_clear_message(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "server", listen=ListenAddress("127.0.0.1", 0))
    (tmp_path / "token").write_text("dyh_abc_wrong\n")
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_server, config))
        argv = [
            "hostd", "--server", bound.local_url, "--token-file", str(tmp_path / "token"),
            "--region", "eu", "--data-dir", str(tmp_path / "host"),
        ]  # fmt: skip
        with trio.fail_after(60):
            result = await run(argv, clean_env(), tmp_path)
        assert result.returncode == 3
        assert "refused the host token (HTTP 401)" in result.stderr.decode()
        nursery.cancel_scope.cancel()


async def test_cli_hostd_reads_the_emulator_config_at_its_edge(tmp_path: Path) -> None:
    """The android-emulator driver's environment is read by the CLI, before any link."""
    (tmp_path / "token").write_text("dyh_whatever\n")
    env = clean_env(DEVYARD_EMULATOR_ATTACH="nohost")
    argv = ["hostd", "--server", "http://127.0.0.1:9", "--token-file", str(tmp_path / "token"),
            "--region", "eu", "--drivers", "android-emulator"]  # fmt: skip
    with trio.fail_after(60):
        result = await run(argv, env, tmp_path)
    assert result.returncode == 2, result.stderr
    assert b"bad adbd address 'nohost'" in result.stderr
    assert b"Traceback" not in result.stderr


async def test_cli_hostd_refuses_a_bad_allow_network(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t\n")
    argv = [
        "hostd", "--server", "http://127.0.0.1:1", "--token-file", str(tmp_path / "token"),
        "--region", "eu", "--allow-network", "10.0.0.0/33",
    ]  # fmt: skip
    with trio.fail_after(60):
        result = await run(argv, clean_env(), tmp_path)
    assert result.returncode == 2
    assert b"'10.0.0.0/33' is not an address or a CIDR network" in result.stderr


async def test_cli_hostd_takes_several_drivers_and_names_an_unknown_one(tmp_path: Path) -> None:
    """``--drivers virtual,android-emulator`` is one host running both (each order on the
    driver for its platform): the list is accepted and the emulator's config is loaded for
    it; an unknown name is refused by name."""
    (tmp_path / "token").write_text("dyh_whatever\n")
    base = ["hostd", "--server", "http://127.0.0.1:9", "--token-file", str(tmp_path / "token"),
            "--region", "eu", "--drivers"]  # fmt: skip
    with trio.fail_after(60):
        unknown = await run([*base, "virtual,nosuch"], clean_env(), tmp_path)
    assert unknown.returncode == 2
    assert b"(unknown: nosuch)" in unknown.stderr
    env = clean_env(DEVYARD_EMULATOR_ATTACH="nohost")
    with trio.fail_after(60):
        both = await run([*base, "virtual,android-emulator"], env, tmp_path)
    assert both.returncode == 2, both.stderr  # got as far as the emulator's own config
    assert b"bad adbd address 'nohost'" in both.stderr
