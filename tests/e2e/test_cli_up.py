"""``devyard up`` as a person runs it: a fresh data dir, a key printed once, then kept."""

from __future__ import annotations

import signal
import stat
from pathlib import Path

import httpx
import pytest
import trio

from ._cli import clean_env, start

pytestmark = pytest.mark.slow


async def test_up_prints_a_working_key_once_and_then_says_where_it_is(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = clean_env()
    with trio.fail_after(60):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        await up.read_until(r"admin API key \(shown once")
        key = (await up.read_line()).strip()
        await up.read_until(r"^try: curl")
        assert key.startswith("dy_")

        key_file = data / "admin-api-key"
        assert key_file.read_text().strip() == key
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(data.stat().st_mode) == 0o700

        async with httpx.AsyncClient(base_url=url) as http:
            me = await http.get("/whoami", headers={"Authorization": f"Bearer {key}"})
            anonymous = await http.get("/whoami")
        assert me.status_code == 200
        assert (me.json()["organization"]["name"], me.json()["role"]) == ("default", "admin")
        assert anonymous.status_code == 401
        assert anonymous.json()["message"].startswith("missing API key")

        assert await up.stop(signal.SIGTERM) == 0

        again = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
        url = (await again.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        where = await again.read_line()
        assert where == f"admin API key: in {key_file}"
        async with httpx.AsyncClient(base_url=url) as http:
            me = await http.get("/whoami", headers={"Authorization": f"Bearer {key}"})
        assert me.status_code == 200
        assert await again.stop(signal.SIGINT) == 0
    assert not any(key in line for line in again.lines)


async def test_up_refuses_a_bad_config_with_exit_code_2(tmp_path: Path) -> None:
    env = clean_env(DEVYARD_RATE_LIMIT_BURST="lots")
    with trio.fail_after(30):
        up = await start(["up", "--data-dir", str(tmp_path / "d"), "--port", "0"], env, tmp_path)
        assert await up.process.wait() == 2
    assert not (tmp_path / "d").exists()
