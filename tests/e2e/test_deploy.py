"""What deploy/ and scripts/build-connector ship, checked with real tools: the systemd units by
``systemd-analyze verify``, the launchd plist by plistlib and the command it names, and the
single-file connector built by PyInstaller, started, and linked to a real server."""

from __future__ import annotations

import plistlib
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from tests.polling import until

from ._cli import clean_env, start
from .conftest import ConnectorBuild

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DEVYARD = shutil.which("devyard", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
@pytest.mark.parametrize("unit", sorted(p.name for p in (DEPLOY / "systemd").glob("*.service")))
def test_the_systemd_units_verify(unit: str, tmp_path: Path) -> None:
    assert DEVYARD is not None
    text = (DEPLOY / "systemd" / unit).read_text()
    # the units name the installed paths; point them at this checkout's commands
    text = text.replace("/usr/local/bin/devyard-connector", DEVYARD).replace(
        "/usr/local/bin/devyard", DEVYARD
    )
    (tmp_path / unit).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


def test_the_launchd_plist_runs_a_real_hostd_command_line() -> None:
    with (DEPLOY / "launchd" / "dev.devyard.hostd.plist").open("rb") as file:
        plist = plistlib.load(file)
    assert plist["Label"] == "dev.devyard.hostd" and plist["KeepAlive"] == {"SuccessfulExit": False}
    argv = plist["ProgramArguments"]
    assert argv[:2] == ["/usr/local/bin/devyard", "hostd"]
    assert DEVYARD is not None
    usage = subprocess.run([DEVYARD, "hostd", "--help"], capture_output=True, text=True,
                           timeout=60, check=True).stdout  # fmt: skip
    for flag in (a for a in argv if a.startswith("--")):
        assert flag in usage, flag


def test_the_containerfile_installs_extras_that_exist() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    extras = set(re.findall(r"pip install '\.\[(\w+)\]'", text))
    assert extras == {"server", "client"}
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extra in extras:
        assert re.search(rf"^{extra} = \[", pyproject, re.MULTILINE), extra


@pytest.mark.slow
@pytest.mark.timeout(1500)  # run alone, the test waits for the whole build
async def test_the_single_file_connector_starts_and_holds_a_tunnel(
    tmp_path: Path, connector_build: ConnectorBuild
) -> None:
    """Built with PyInstaller (minutes on a busy 2-core machine; started in the background when
    collection ends, tests/e2e/conftest.py), then run like a customer would: --version, and a
    tunnel held against a real ``devyard up``."""
    built = connector_build
    assert built.returncode == 0, built.stderr.decode()[-3000:]
    assert re.search(rb"built .*devyard-connector: \d+ KiB, --version in \d+ ms", built.stdout)
    exe = built.executable
    with trio.fail_after(60):
        version = await trio.run_process([str(exe), "--version"], capture_stdout=True)
    assert version.stdout.startswith(b"devyard-connector "), version
    data = tmp_path / "data"
    with trio.fail_after(60):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path)
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
    key = (data / "admin-api-key").read_text().strip()
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            made = await http.post(
                "/v1/tunnels", json={"name": "binary", "selectors": ["intranet.example:8080"]}
            )
            assert made.status_code == 200, made.text
            (tmp_path / "token").write_text(made.json()["token"] + "\n")
            connector = await trio.lowlevel.open_process(
                [str(exe), "run", "--server", url, "--token-file", str(tmp_path / "token")],
                stderr=subprocess.DEVNULL,
            )
            try:

                async def online() -> bool:
                    got = await http.get("/v1/tunnels/binary")
                    return bool(got.json()["status"] == "online")

                await until(online, seconds=60)
            finally:
                connector.send_signal(signal.SIGINT)
                with trio.fail_after(30):
                    assert await connector.wait() == 0
    finally:
        with trio.fail_after(30):
            await up.stop(signal.SIGINT)
