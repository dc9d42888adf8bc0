"""`devyard tunnel ...`, `devyard keys ...`, `devyard login` / `profiles`: the real CLI against
`devyard up`, JSON parsed, exit codes checked, ``| head -1`` clean."""

from __future__ import annotations

import stat
from pathlib import Path

from tests.ops._up import open_up

from ._cli import Cli


async def test_tunnels_keys_and_profiles(tmp_path: Path) -> None:
    async with open_up(tmp_path) as up:
        cli = Cli.of(tmp_path, DEVYARD_BASE_URL=up.url, DEVYARD_API_KEY=up.key)

        # tunnels: the token once, with the connector command to copy
        created = await cli("tunnel", "create", "corp", "--selector", "db.corp:5432")
        assert created.code == 0, created.err
        token = created.out.splitlines()[1]
        assert token.startswith("dyt_")
        assert f"DEVYARD_TUNNEL_TOKEN={token} devyard connector run --server {up.url}" in (
            created.out
        )
        as_json = (await cli("tunnel", "create", "lab", "--selector", "*.lab:22", "--json")).json()
        assert as_json["name"] == "lab" and as_json["token"].startswith("dyt_")
        listed = (await cli("tunnel", "list", "--json")).json()
        assert sorted(t["name"] for t in listed) == ["corp", "lab"]
        assert all("token" not in t for t in listed), "a token is shown once, never listed"
        table = await cli("tunnel", "list")
        assert table.out.splitlines()[0].split()[:2] == ["NAME", "STATUS"]
        assert token not in table.out
        got = (await cli("tunnel", "get", "corp", "--json")).json()
        assert (got["selectors"], got["status"]) == (["db.corp:5432"], "offline")
        updated = await cli("tunnel", "update", "corp", "--selector", "db.corp:6432", "--json")
        assert updated.json()["selectorVersion"] == 2
        rotated = await cli("tunnel", "rotate", "corp", "--json")
        assert rotated.json()["token"] not in (token, None)
        again = await cli("tunnel", "create", "corp", "--selector", "x:1")
        assert again.code == 5, again.err  # 409: it exists
        assert (await cli("tunnel", "get", "nope")).code == 3
        bad = await cli("tunnel", "create", "Bad Name", "--selector", "x:1")
        assert bad.code == 1 and bad.err.startswith("devyard: error:") and "(HTTP 400)" in bad.err
        status, first, err = await cli.piped_to_head("tunnel", "list")
        assert first.startswith("NAME") and err == "" and status in (0, 141)
        closed = await cli.into_closed_pipe("tunnel", "list", "--json")
        assert (closed.returncode, closed.stderr) == (141, b"")
        deleted = await cli("tunnel", "delete", "lab")
        assert (deleted.code, deleted.out.strip()) == (0, "deleted tunnel lab")
        assert (await cli("tunnel", "delete", "lab")).code == 3

        # keys
        key = (await cli("keys", "create", "ci", "--read-only", "--json")).json()
        assert key["key"].startswith("dy_") and key["readOnly"] is True
        keys = (await cli("keys", "list", "--json")).json()
        assert "ci" in [k["name"] for k in keys]
        read_only = cli.but(DEVYARD_API_KEY=key["key"])
        refused = await read_only("tunnel", "create", "x", "--selector", "x:1")
        assert refused.code == 4, refused.err  # 403: a read-only key

        # profiles: login checks the key, saves it 0600; --profile picks it; env still wins
        bare = cli.but(DEVYARD_BASE_URL=None, DEVYARD_API_KEY=None)
        key_file = tmp_path / "key.txt"
        key_file.write_text(up.key + "\n")
        login = await bare("login", "--base-url", up.url, "--api-key-file", str(key_file))
        assert login.code == 0 and "profile 'default'" in login.out, login.err
        config = tmp_path / "config" / "config.toml"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert up.key not in login.out
        assert (await bare("whoami", "--json")).json()["role"] == "admin"
        wrong = tmp_path / "wrong.txt"
        wrong.write_text("dy_wrong_key\n")
        refused_login = await bare(
            "login", "--profile", "ro", "--base-url", up.url, "--api-key-file", str(wrong)
        )
        assert refused_login.code == 4 and '"ro"' not in config.read_text()
        assert (
            await bare("login", "--profile", "ro", "--no-default", "--api-key", key["key"])
        ).code == 0
        profiles = (await bare("profiles", "--json")).json()
        assert [(p["name"], p["default"], p["hasKey"]) for p in profiles] == [
            ("default", True, True),
            ("ro", False, True),
        ]
        assert key["key"] not in (await bare("profiles")).out, "keys are never printed"
        ro_refused = await bare("tunnel", "create", "y", "--selector", "y:1", "--profile", "ro")
        assert ro_refused.code == 4
        assert (await bare("tunnel", "list", "--profile", "nope")).code == 2
        env_wins = await bare.but(DEVYARD_API_KEY="dy_wrong_key")("tunnel", "list")
        assert env_wins.code == 4
        flag_wins = await bare.but(DEVYARD_API_KEY="dy_wrong_key")(
            "tunnel", "list", "--api-key", up.key, "--json"
        )
        assert flag_wins.code == 0
