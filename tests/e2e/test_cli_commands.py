"""The user commands (``devyard whoami``, ``members``, ``keys``) against a real server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.store import open_store

from ._cli import clean_env, run

pytestmark = pytest.mark.slow


@attrs.frozen
class Server:
    url: str
    key: str = attrs.field(repr=False)


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Server]:
    config = ServerConfig(data_dir=tmp_path, listen=ListenAddress("127.0.0.1", 0))
    async with open_store(str(tmp_path / "store.db")) as store:
        boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
        shutdown = trio.Event()
        bound: BoundServer = await nursery.start(
            partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
        )
        yield Server(url=bound.base_url, key=boot.plaintext_key)
        shutdown.set()


async def test_whoami_prints_a_table_or_json(server: Server, tmp_path: Path) -> None:
    env = clean_env(DEVYARD_BASE_URL=server.url, DEVYARD_API_KEY=server.key)
    with trio.fail_after(60):
        table = await run(["whoami"], env, tmp_path)
        as_json = await run(["whoami", "--json"], env, tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.decode().splitlines()
    assert lines[0].split()[:2] == ["user", "alice"]
    assert lines[2].split() == ["role", "admin"]
    me = json.loads(as_json.stdout)
    assert (me["user"]["name"], me["organization"]["name"]) == ("alice", "acme")


async def test_flags_take_the_key_from_a_file(server: Server, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(server.key + "\n")
    with trio.fail_after(60):
        result = await run(
            ["whoami", "--server", server.url, "--api-key-file", str(key_file), "--json"],
            clean_env(DEVYARD_API_KEY="dy_ignored"),
            tmp_path,
        )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["role"] == "admin"


async def test_members_and_keys_commands(server: Server, tmp_path: Path) -> None:
    env = clean_env(DEVYARD_BASE_URL=server.url, DEVYARD_API_KEY=server.key)
    with trio.fail_after(60):
        added = await run(["members", "add", "bob", "--role", "viewer"], env, tmp_path)
        assert added.returncode == 0, added.stderr
        listed = await run(["members", "list"], env, tmp_path)
        created = await run(["keys", "create", "for-bob", "--user", "bob", "--json"], env, tmp_path)
        key = json.loads(created.stdout)
        keys = await run(["keys", "list"], env, tmp_path)
        revoked = await run(["keys", "revoke", key["id"]], env, tmp_path)
    rows = [line.split() for line in listed.stdout.decode().splitlines()]
    assert rows[0][:3] == ["USER", "ROLE", "EMAIL"]
    assert [r[:2] for r in rows[1:]] == [["alice", "admin"], ["bob", "viewer"]]
    assert key["key"].startswith("dy_") and key["name"] == "for-bob"
    assert "for-bob" in keys.stdout.decode()
    assert key["key"] not in keys.stdout.decode()
    assert revoked.stdout.decode().strip() == f"revoked {key['id']}"


async def test_errors_exit_1_with_the_servers_message(server: Server, tmp_path: Path) -> None:
    with trio.fail_after(60):
        denied = await run(
            ["members", "remove", "alice"],
            clean_env(DEVYARD_BASE_URL=server.url, DEVYARD_API_KEY=server.key),
            tmp_path,
        )
        bad_key = await run(
            ["whoami"], clean_env(DEVYARD_BASE_URL=server.url, DEVYARD_API_KEY="dy_x"), tmp_path
        )
        no_key = await run(["whoami"], clean_env(DEVYARD_BASE_URL=server.url), tmp_path)
    assert denied.returncode == 1  # 422: refused for a reason of its own (docs/cli.md)
    assert "last admin" in denied.stderr.decode() and "(HTTP 422)" in denied.stderr.decode()
    assert bad_key.returncode == 4  # authentication (docs/cli.md exit codes)
    assert bad_key.stderr.decode().startswith("devyard: error: invalid API key (HTTP 401)")
    assert bad_key.stderr.decode().count("\n") == 1
    assert no_key.returncode == 2
    assert "DEVYARD_API_KEY" in no_key.stderr.decode()
