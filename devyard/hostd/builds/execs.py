"""One exec: its process tree in the sandbox, its numbered events and its log.

Events are numbered from 1 in the order they happened and kept for the exec's life (bounded:
past `MAX_OUTPUT` bytes of output one ``stderr`` event says so and the rest is dropped), so an
event stream can be replayed from any ``Last-Event-ID``. ``stdout``/``stderr`` events carry
one line each without its line break; ``progress`` one Gradle task ``{task, outcome}`` read
from the plain console (``:app:jar``, ``:app:test UP-TO-DATE``); ``artifact`` one collected
file ``{name, path, size, sha256}``; ``exitCode`` comes last and exactly once: the process's
exit status, or ``-1`` when cancelled. The log file holds the output lines as plain text.

The process tree runs in its own session (``start_new_session``) and, inside bubblewrap, its
own PID namespace: cancel (and the instance's end) sends SIGKILL to the group, which takes
the namespace's init down and the kernel kills everything left in it.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from .commands import ExecPlan
from .paths import glob_regex
from .warm import WarmProcess, WarmSandboxError

__all__ = ["Event", "Exec", "ExecStatus", "collect_artifacts", "run_exec"]

MAX_OUTPUT: Final = 64 * 1024 * 1024
MAX_LINE: Final = 64 * 1024
MAX_ARTIFACTS: Final = 64
MAX_ARTIFACT_BYTES: Final = 2 * 1024**3
_READ: Final = 64 * 1024
_TASK_LINE: Final = re.compile(
    r"(?:> Task )?(:[A-Za-z0-9_.:\-]*[A-Za-z0-9_\-])"
    r"(?: (UP-TO-DATE|NO-SOURCE|FROM-CACHE|SKIPPED|FAILED))?"
)
CANCELLED_EXIT: Final = -1
_DRAIN_S: Final = 2.0


class ExecStatus(enum.StrEnum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


@attrs.frozen
class Event:
    id: int
    type: str
    data: str


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Exec:
    """An exec's record and event log; `run_exec` drives it."""

    def __init__(self, exec_id: str, plan: ExecPlan, directory: Path) -> None:
        self.id = exec_id
        self.plan = plan
        self.directory = directory  # log.txt and artifacts/, outside the workspace
        self.status = ExecStatus.RUNNING
        self.exit_code: int | None = None
        self.error: str | None = None
        self.started_at = _now()
        self.finished_at: str | None = None
        self._started = time.monotonic()
        self.duration_ms: int | None = None
        self.events: list[Event] = []
        self.artifacts: list[dict[str, Any]] = []
        self.webhook: dict[str, Any] | None = None  # the delivery's outcome (webhook.py)
        self.scope = trio.CancelScope()
        self.cancel_requested_at: float | None = None  # trio time
        self.killed_at: float | None = None  # trio time the tree was gone
        self._output = 0
        self._truncated = False
        self._changed = trio.Event()
        self.done = trio.Event()
        self._log: Any = None  # the log file, open while the exec runs

    @property
    def log_path(self) -> Path:
        return self.directory / "log.txt"

    @property
    def last_id(self) -> int:
        return len(self.events)

    def emit(self, kind: str, data: str) -> None:
        if kind in ("stdout", "stderr"):
            self._output += len(data) + 1
            if self._output > MAX_OUTPUT:
                if self._truncated:
                    return
                self._truncated = True
                kind, data = "stderr", f"devyard: output past {MAX_OUTPUT} bytes is dropped"
            if self._log is None:
                self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115
            self._log.write(data + "\n")
        self.events.append(Event(len(self.events) + 1, kind, data))
        self._changed.set()
        self._changed = trio.Event()

    def after(self, last_id: int) -> list[Event]:
        return self.events[max(0, last_id) :]

    async def wait_beyond(self, last_id: int) -> None:
        """Until there is an event after *last_id* (or the exec is over)."""
        while self.last_id <= last_id and not self.done.is_set():
            await self._changed.wait()

    def cancel(self) -> None:
        if self.status is ExecStatus.RUNNING and self.cancel_requested_at is None:
            self.cancel_requested_at = trio.current_time()
            self.scope.cancel()

    def finish(self, status: ExecStatus, exit_code: int, error: str | None = None) -> None:
        self.status, self.exit_code, self.error = status, exit_code, error
        self.finished_at = _now()
        self.duration_ms = round((time.monotonic() - self._started) * 1000)
        self.emit("exitCode", str(exit_code))
        if self._log is not None:
            self._log.close()
            self._log = None
        self.done.set()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "execId": self.id,
            "command": self.plan.kind,
            "status": self.status.value,
            "startedAt": self.started_at,
            "lastEventId": self.last_id,
            "artifacts": self.artifacts,
        }
        if self.exit_code is not None:
            out["exitCode"] = self.exit_code
        if self.finished_at is not None:
            out["finishedAt"] = self.finished_at
            out["buildDurationMs"] = self.duration_ms
        if self.error:
            out["error"] = self.error
        if self.webhook is not None:
            out["webhook"] = self.webhook
        if self.cancel_requested_at is not None and self.killed_at is not None:
            out["cancelKillMs"] = round((self.killed_at - self.cancel_requested_at) * 1000, 1)
        return out


class _Lines:
    """Bytes in, whole lines out (CR, LF and CRLF end a line; overlong lines are split)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._buf = b""

    def feed(self, data: bytes) -> None:
        self._buf += data
        while True:
            match = re.search(rb"\r\n|\r|\n", self._buf)
            if match is None or (match.end() == len(self._buf) and self._buf.endswith(b"\r")):
                break
            self._emit(self._buf[: match.start()].decode("utf-8", "replace"))
            self._buf = self._buf[match.end() :]
        while len(self._buf) > MAX_LINE:
            self._emit(self._buf[:MAX_LINE].decode("utf-8", "replace"))
            self._buf = self._buf[MAX_LINE:]

    def close(self) -> None:
        if self._buf:
            self._emit(self._buf.rstrip(b"\r").decode("utf-8", "replace"))
            self._buf = b""


def _stdout_handler(run: Exec) -> Callable[[str], None]:
    def on_line(line: str) -> None:
        run.emit("stdout", line)
        if run.plan.kind == "gradlebuild":
            match = _TASK_LINE.fullmatch(line.strip())
            if match is not None:
                outcome = match.group(2) or "EXECUTED"
                run.emit("progress", json.dumps({"task": match.group(1), "outcome": outcome}))

    return on_line


async def _pump(source: trio.abc.ReceiveStream, lines: _Lines) -> None:
    while data := await source.receive_some(_READ):
        lines.feed(bytes(data))
    lines.close()


async def run_exec(
    run: Exec,
    argv: Callable[..., list[str]],
    *,
    workspace: Path,
    on_end: Callable[[Exec], None],
    warm: Callable[[], Awaitable[WarmProcess]] | None = None,
) -> None:
    """Run ``argv(info_fd=N)`` (the sandboxed command line) for *run* to its end, cancel or
    timeout; then collect the artifacts of a success and emit ``exitCode``. *warm*: run the
    plan in the instance's warm sandbox instead (warm.py; *argv* is then unused)."""
    run.emit("command", run.plan.display)
    status, code, error = ExecStatus.FAILED, 1, None
    try:
        process, info_read = await _open(argv, warm)
    except (OSError, WarmSandboxError) as exc:
        run.finish(ExecStatus.FAILED, 127, f"the sandbox did not start: {exc}")
        on_end(run)
        return
    assert process.stdout is not None and process.stderr is not None
    init: list[int] = []  # the sandbox's init, once bubblewrap says
    try:
        with run.scope:
            run.scope.deadline = trio.current_time() + run.plan.timeout_s
            async with trio.open_nursery() as pumps:
                if info_read is not None:
                    pumps.start_soon(_read_init, info_read, init)
                pumps.start_soon(_pump, process.stdout, _Lines(_stdout_handler(run)))
                pumps.start_soon(_pump, process.stderr, _Lines(lambda s: run.emit("stderr", s)))
                await process.wait()
                if isinstance(process, WarmProcess):
                    if process.message is not None:
                        run.emit("stderr", process.message)
                    # a process that left the exec's group may hold its output: not for long
                    pumps.cancel_scope.deadline = trio.current_time() + _DRAIN_S
        code = process.returncode if process.returncode is not None else 1
        if run.scope.cancelled_caught:
            if run.cancel_requested_at is not None:
                status, code = ExecStatus.CANCELLED, CANCELLED_EXIT
            else:
                error = f"timed out after {run.plan.timeout_s:g} s"
                status, code = ExecStatus.FAILED, 124
        else:
            status = ExecStatus.SUCCEEDED if code == 0 else ExecStatus.FAILED
    finally:
        with trio.CancelScope(shield=True):
            if isinstance(process, WarmProcess):
                await process.kill()
                for stream in (process.stdout, process.stderr):
                    await stream.aclose()
            else:
                await _kill_tree(process, init)
            if run.cancel_requested_at is not None:
                run.killed_at = trio.current_time()
            if status is ExecStatus.SUCCEEDED and run.plan.artifacts:
                found = await trio.to_thread.run_sync(
                    collect_artifacts, workspace, run.plan.artifacts, run.directory / "artifacts"
                )
                for artifact in found:
                    run.artifacts.append(artifact)
                    run.emit("artifact", json.dumps(artifact))
            run.finish(status, code, error)
            on_end(run)


async def _open(
    argv: Callable[..., list[str]], warm: Callable[[], Awaitable[WarmProcess]] | None
) -> tuple[trio.Process | WarmProcess, int | None]:
    """The exec's process (in its own sandbox, or the warm one) and bubblewrap's info fd."""
    if warm is not None:
        return await warm(), None
    info_read, info_write = os.pipe()
    try:
        process = await trio.lowlevel.open_process(
            argv(info_fd=info_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(info_write,),
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
    except OSError:
        os.close(info_read)
        raise
    finally:
        os.close(info_write)
    return process, info_read


async def _read_init(fd: int, init: list[int]) -> None:
    """bubblewrap's ``--info-fd`` JSON: the host PID of the sandbox's init, into *init*."""
    data = b""
    async with trio.lowlevel.FdStream(fd) as info:
        while len(data) < 4096 and (chunk := await info.receive_some(4096)):
            data += chunk
    with contextlib.suppress(ValueError, TypeError):
        init.append(int(json.loads(data)["child-pid"]))


async def _kill_tree(process: trio.Process, init: list[int]) -> None:
    """SIGKILL the sandbox's init (the kernel then kills everything in its PID namespace,
    whatever session it is in) and bubblewrap's process group; wait for bubblewrap."""
    if process.returncode is None:
        for pid in init:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            await pipe.aclose()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # a straggler of the group outside the namespace


def collect_artifacts(workspace: Path, globs: tuple[str, ...], into: Path) -> list[dict[str, Any]]:
    """Copy the workspace's regular files matching *globs* into *into* (blocking). Links are
    never followed (a build may leave one pointing anywhere), nor are linked directories."""
    patterns = [glob_regex(g) for g in globs]
    found: list[dict[str, Any]] = []
    total = 0
    for top, dirs, names in os.walk(workspace, followlinks=False):
        dirs.sort()
        rel_top = os.path.relpath(top, workspace)
        prefix = "" if rel_top == "." else rel_top.replace(os.sep, "/") + "/"
        for name in sorted(names):
            rel = prefix + name
            if not any(p.match(rel) for p in patterns):
                continue
            if len(found) >= MAX_ARTIFACTS:
                return found
            copied = _copy_regular(Path(top) / name, into / rel, MAX_ARTIFACT_BYTES - total)
            if copied is not None:
                size, digest = copied
                total += size
                found.append({"name": name, "path": rel, "size": size, "sha256": digest})
    return found


def _copy_regular(source: Path, dest: Path, budget: int) -> tuple[int, str] | None:
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > budget:
            return None
        dest.parent.mkdir(parents=True, exist_ok=True)
        digest, size = hashlib.sha256(), 0
        with open(dest, "wb") as out:
            while block := handle.read(1024 * 1024):
                digest.update(block)
                out.write(block)
                size += len(block)
    return size, digest.hexdigest()
