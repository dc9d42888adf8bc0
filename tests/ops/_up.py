"""`devyard up` as a subprocess for the operations tests: its API URL, admin key, operator
port and its log (stderr) in a file."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from tests.e2e._cli import DEVYARD, Running, clean_env
from tests.ports import free_port


@attrs.frozen
class Up:
    url: str
    key: str = attrs.field(repr=False)
    metrics_url: str
    log: Path
    data: Path
    running: Running

    def log_text(self) -> str:
        return self.log.read_text()


@asynccontextmanager
async def open_up(tmp_path: Path, *extra: str, **env: str) -> AsyncIterator[Up]:
    data = tmp_path / "data"
    log = tmp_path / "up.log"
    port = free_port()
    with log.open("wb") as err:
        process = await trio.lowlevel.open_process(
            [
                *DEVYARD,
                *("up", "--data-dir", str(data), "--port", "0"),
                *("--metrics-listen", f"127.0.0.1:{port}", *extra),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            env=clean_env(**env),
            cwd=tmp_path,
        )
    running = Running(process)
    try:
        with trio.fail_after(60):
            url = (await running.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        key = (data / "admin-api-key").read_text().strip()
        yield Up(url, key, f"http://127.0.0.1:{port}/metrics", log, data, running)
    finally:
        if process.returncode is None:
            with trio.move_on_after(30):
                await running.stop(signal.SIGINT)
            if process.returncode is None:
                process.kill()
                await process.wait()
