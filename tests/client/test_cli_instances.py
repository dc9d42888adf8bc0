"""`devyard android ...` as a user runs it: the real CLI against `devyard up`, JSON parsed,
exit codes checked, a device driven, output piped to ``head -1``."""

from __future__ import annotations

import signal
import subprocess
import zipfile
from pathlib import Path

import httpx
import trio

from tests.e2e._cli import DEVYARD
from tests.ops._up import open_up

from ._cli import Cli


def _apk(path: Path, package: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("devyard-package.txt", f"{package}\nlabel=Demo\nversion=1.0\n")
    return path


async def _host_linked(url: str) -> None:
    """Until up's own host daemon has linked (/readyz counts the hosts)."""
    async with httpx.AsyncClient(base_url=url) as http:
        linked = "none linked"
        while linked == "none linked":  # another process links it
            linked = (await http.get("/readyz")).json()["checks"]["hosts"]
            await trio.sleep(0.1)


async def test_android_instances_and_device_verbs(tmp_path: Path) -> None:
    async with open_up(tmp_path) as up:
        cli = Cli.of(tmp_path, DEVYARD_BASE_URL=up.url, DEVYARD_API_KEY=up.key)
        with trio.fail_after(60):
            await _host_linked(up.url)
        created = await cli("android", "create", "--wait", "--label", "pr=42", "--json")
        instance = created.json()
        instance_id = instance["metadata"]["id"]
        assert instance["status"]["state"] == "ready"
        assert instance["metadata"]["labels"] == {"pr": "42"}

        listed = (await cli("android", "list", "--label", "pr=42", "--json")).json()
        assert [i["metadata"]["id"] for i in listed] == [instance_id]
        assert (await cli("android", "list", "--label", "pr=7", "--json")).json() == []
        table = await cli("android", "list")
        assert table.code == 0 and table.out.splitlines()[0].split()[:2] == ["ID", "STATE"]
        assert instance_id in table.out and "pr=42" in table.out
        got = (await cli("android", "get", instance_id, "--json")).json()
        assert got["metadata"]["id"] == instance_id

        # device verbs, through the instance's own API
        shot = await cli("android", "screenshot", instance_id, "-o", "shot.png")
        assert shot.code == 0, shot.err
        assert (tmp_path / "shot.png").read_bytes().startswith(b"\x89PNG")
        assert (await cli("android", "tap", instance_id, "10", "20")).code == 0
        assert (await cli("android", "type", instance_id, "hello")).code == 0
        opened = await cli("android", "open-url", instance_id, "https://example.com", "--json")
        assert opened.json() == {"ok": True}
        apk = _apk(tmp_path / "demo.apk", "com.acme.demo")
        installed = await cli("android", "install", instance_id, str(apk))
        assert installed.code == 0 and "com.acme.demo" in installed.out, installed.err
        apps = (await cli("android", "apps", instance_id, "--json")).json()
        assert "com.acme.demo" in [a["id"] for a in apps]

        # | head -1: the header line, no traceback, no noise; a closed pipe exits 141 silently
        status, first, err = await cli.piped_to_head("android", "list")
        assert first.startswith("ID") and err == "" and status in (0, 141)
        closed = await cli.into_closed_pipe("android", "list", "--json")
        assert (closed.returncode, closed.stderr) == (141, b"")

        # exit codes that mean something
        missing = await cli("android", "get", "android_nope")
        assert missing.code == 3 and missing.err.count("\n") == 1 and "not found" in missing.err
        bad_key = await cli.but(DEVYARD_API_KEY="dy_wrong_wrong")("android", "list")
        assert bad_key.code == 4 and bad_key.err.startswith("devyard: error:")
        no_key = await cli.but(DEVYARD_API_KEY=None)("android", "list")
        assert no_key.code == 2 and "devyard login" in no_key.err
        down = await cli.but(DEVYARD_BASE_URL="http://127.0.0.1:9")("android", "list")
        assert down.code == 6 and "cannot reach the server" in down.err
        bad_label = await cli("android", "create", "--label", "nolabel")
        assert bad_label.code == 2

        deleted = await cli("android", "delete", instance_id)
        assert (deleted.code, deleted.out.strip()) == (0, f"deleted {instance_id}")
        gone = await cli("android", "screenshot", instance_id)
        assert gone.code == 5 and "not ready" in gone.err


async def test_create_rm_deletes_the_instance_on_ctrl_c(tmp_path: Path) -> None:
    async with open_up(tmp_path) as up:
        cli = Cli.of(tmp_path, DEVYARD_BASE_URL=up.url, DEVYARD_API_KEY=up.key)
        with trio.fail_after(60):
            await _host_linked(up.url)
            process = await trio.lowlevel.open_process(
                [*DEVYARD, "ios", "create", "--rm", "--json"],
                env=cli.env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert process.stderr is not None
            said = b""
            while b"Ctrl-C" not in said:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, said
                said += chunk
            instance_id = said.split()[0].decode()
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 0
        got = (await cli("ios", "get", instance_id, "--json")).json()
        assert got["status"]["state"] == "terminated"
