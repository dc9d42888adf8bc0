"""Helper processes of a benchmark or an interop test, owned by an `async with`.

Every child runs in its own process group (`start_new_session=True`), so a Ctrl-C in the
terminal reaches only the harness, which then ends each child itself: SIGTERM to the child's
group, a bounded wait, SIGKILL. Signals go only to groups whose leader we started and have not
reaped yet, so the id cannot have been reused. stdin is a pipe the child may treat as a
lifeline (it exits at EOF, i.e. when the harness is gone); stdout is line-oriented (children
announce `LISTEN host:port` and answer commands); stderr goes to a log file whose tail is shown
when something fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Final

import trio

TERM_GRACE: Final = 3.0


class ChildError(Exception):
    """A helper process misbehaved: exited early, said something unexpected."""


class Child:
    """A running helper: line I/O on its stdin/stdout, its stderr in `log_path`."""

    def __init__(self, name: str, process: trio.Process, log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        self._buffer = bytearray()

    def __repr__(self) -> str:
        return f"<Child {self.name} pid={self.process.pid}>"

    @property
    def pid(self) -> int:
        return self.process.pid

    async def readline(self) -> str:
        """The next stdout line without its newline; ChildError at EOF."""
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line.decode(errors="replace").rstrip("\r")
            chunk = await stdout.receive_some(65536)
            if not chunk:
                raise ChildError(f"{self.name} closed its stdout{self.tail_note()}")
            self._buffer += chunk

    async def send_line(self, line: str) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        await stdin.send_all(line.encode() + b"\n")

    async def wait_listen(self) -> tuple[str, int]:
        """Wait for `LISTEN host:port` and return the address."""
        line = await self.readline()
        if not line.startswith("LISTEN "):
            raise ChildError(f"{self.name}: expected LISTEN, got {line!r}{self.tail_note()}")
        host, _, port = line.removeprefix("LISTEN ").rpartition(":")
        return host.strip("[]"), int(port)

    def tail_note(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        tail = text.strip().splitlines()[-lines:]
        return ("\n  " + "\n  ".join(tail)) if tail else ""


async def _terminate(process: trio.Process) -> None:
    """End the child's process group: SIGTERM, bounded wait, SIGKILL. Runs shielded."""
    with trio.CancelScope(shield=True):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if process.returncode is not None:
                break
            with suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with trio.move_on_after(TERM_GRACE):
                await process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                await trio.aclose_forcefully(pipe)
        await process.wait()


@asynccontextmanager
async def spawn(
    name: str,
    argv: Sequence[str],
    *,
    logdir: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Child]:
    """Start `argv` as a child in its own process group; end it when the block exits."""
    log_path = logdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )
        try:
            yield Child(name, process, log_path)
        finally:
            await _terminate(process)


async def wait_connectable(host: str, port: int, child: Child | None = None) -> None:
    """Poll until a TCP connect to host:port succeeds (the caller bounds the wait); ChildError
    if `child`, the process that should be listening there, exits first."""
    while child is None or child.process.returncode is None:
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            await trio.sleep(0.05)
            continue
        await stream.aclose()
        return
    raise ChildError(f"{child.name} exited ({child.process.returncode}){child.tail_note()}")
