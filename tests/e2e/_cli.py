"""Running the real ``devyard`` command as a subprocess from trio tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

DEVYARD = [sys.executable, "-m", "devyard"]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any DEVYARD_* setting, plus *extra*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    env.update(extra)
    return env


@attrs.define
class Running:
    """A long-running ``devyard`` process whose stdout is read line by line."""

    process: trio.Process
    lines: list[str] = attrs.Factory(list)
    _buffer: bytes = b""

    async def read_line(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive_some(4096)
            if not chunk:
                raise AssertionError(f"devyard exited; it printed: {self.lines}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        text = line.decode()
        self.lines.append(text)
        return text

    async def read_until(self, pattern: str) -> re.Match[str]:
        while True:
            match = re.search(pattern, await self.read_line())
            if match:
                return match

    async def stop(self, signum: int) -> int:
        self.process.send_signal(signum)
        assert self.process.stdout is not None
        while await self.process.stdout.receive_some(4096):
            pass
        return await self.process.wait()


async def start(args: list[str], env: Mapping[str, str], cwd: Path) -> Running:
    process = await trio.lowlevel.open_process(
        [*DEVYARD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(env),
        cwd=cwd,
    )
    return Running(process)


async def run(
    args: list[str], env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*DEVYARD, *args],
        env=dict(env),
        cwd=cwd,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def create_ready_android(http: httpx.AsyncClient, seconds: float = 120) -> dict[str, Any]:
    """A ready Android instance from `devyard up` (*http* carries the API key): 409 until its
    companion host daemon has registered, so retry that, for at most *seconds*."""
    with trio.fail_after(seconds):
        while True:
            created = await http.post("/v1/android_instances", params={"wait": "true"}, json={})
            if created.status_code != 409:
                break
            await trio.sleep(0.1)
    assert created.status_code == 200, created.text
    body: dict[str, Any] = created.json()
    assert body["status"]["state"] == "ready", body
    return body
