"""``devyard admin bootstrap`` and ``devyard server``, on SQLite and on PostgreSQL."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
import trio

from ._cli import clean_env, run, start

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_flags(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "sqlite":
        return []
    url: str = request.getfixturevalue("postgres_url")
    return ["--database-url", url]


async def test_bootstrap_prints_a_key_the_server_accepts(
    tmp_path: Path, database_flags: list[str]
) -> None:
    data = ["--data-dir", str(tmp_path / "data"), *database_flags]
    env = clean_env()
    with trio.fail_after(90):
        first = await run(["admin", "bootstrap", *data, "--org", "acme"], env, tmp_path)
        assert first.returncode == 0, first.stderr
        key = first.stdout.decode().splitlines()[-1]
        assert key.startswith("dy_")
        # Again for the same organization: a second, different admin key (recovery).
        second = await run(["admin", "bootstrap", *data, "--org", "acme"], env, tmp_path)
        other_key = second.stdout.decode().splitlines()[-1]
        assert other_key.startswith("dy_") and other_key != key

        server = await start(["server", *data, "--listen", "127.0.0.1:0"], env, tmp_path)
        url = (await server.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        async with httpx.AsyncClient(base_url=url) as http:
            for k in (key, other_key):
                me = await http.get("/whoami", headers={"Authorization": f"Bearer {k}"})
                assert me.status_code == 200
                assert (me.json()["organization"]["name"], me.json()["user"]["name"]) == (
                    "acme",
                    "admin",
                )
            ready = await http.get("/readyz")
        assert ready.json()["message"] == "ready"
        assert ready.json()["checks"]["store"] == "ok"
        assert await server.stop(signal.SIGTERM) == 0
    # `devyard server` never bootstraps by itself.
    assert not (tmp_path / "data" / "admin-api-key").exists()


async def test_a_database_that_cannot_be_reached_is_a_clear_error(tmp_path: Path) -> None:
    url = "postgresql://nobody:hunter2@127.0.0.1:1/devyard"
    with trio.fail_after(60):
        result = await run(
            [
                "admin",
                "bootstrap",
                "--data-dir",
                str(tmp_path),
                "--database-url",
                url,
                "--org",
                "x",
            ],
            clean_env(),
            tmp_path,
        )
    stderr = result.stderr.decode()
    assert result.returncode == 1
    assert stderr.splitlines()[-1].startswith("devyard: error:")
    assert "Traceback" not in stderr
    assert "hunter2" not in stderr
