"""An instance's warm sandbox: one long-lived bubblewrap sandbox that its Gradle execs join,
so the Gradle daemon one build starts serves the next (docs/builds.md, "Warm daemons").

The sandbox is the same as an exec's (``sandbox.sandbox_argv``: the keeper with the
instance's limits, bubblewrap, the build user, the allowlist relay) around the keeper's
``agent`` mode instead of a command. hostd talks to the agent over one end of a socketpair
handed down as a file descriptor (no path: nothing in the sandbox can reach it), sends each
exec's command with its stdout and stderr pipes attached, and gets its PID and exit status
back. Each exec runs in a session of its own; cancelling it kills that session's process
group, and what the exec left in its group is killed when it ends, but a Gradle daemon
(which detaches into a session of its own) lives on in the sandbox, its registry in the
sandbox's private ``/tmp`` (`DAEMON_REGISTRY`), never in the organization's shared Gradle
home, so no other instance's client ever sees it. The sandbox's keeper bounds it as a whole:
the idle daemon's memory counts against the instance's memory limit (past it the keeper kills
the sandbox, and the next exec starts a fresh one). The sandbox is started by the first exec
that wants it and killed with the instance (`WarmSandbox.close`).
"""

from __future__ import annotations

import array
import collections
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from .sandbox import KEEPER, WORKSPACE, SandboxConfig, proxy_env, sandbox_argv

__all__ = ["AGENT_DIR", "DAEMON_REGISTRY", "WarmProcess", "WarmSandbox", "WarmSandboxError"]

log = logging.getLogger(__name__)

#: Where the agent's script is bound in the sandbox (read-only).
AGENT_DIR: Final = "/run/devyard-agent"
#: The Gradle daemons' registry and logs: the sandbox's own tmpfs (``-Dorg.gradle.daemon.
#: registry.base``), so no other instance of the organization ever lists them.
DAEMON_REGISTRY: Final = "/tmp/gradle-daemons"  # noqa: S108 - the sandbox's private tmpfs
_START_S: Final = 30.0
_MAX_MESSAGE: Final = 64 * 1024
_KILL_WAIT_S: Final = 5.0
SANDBOX_GONE: Final = 137


class WarmSandboxError(Exception):
    """The warm sandbox did not start, or ended under an exec."""


class WarmProcess:
    """One exec in the warm sandbox, with the part of `trio.Process` that `execs.run_exec`
    uses: ``stdout``, ``stderr``, ``returncode``, ``wait``, ``kill``."""

    def __init__(self, sandbox: WarmSandbox, ident: str, stdout: int, stderr: int) -> None:
        self._sandbox = sandbox
        self.id = ident
        self.stdout: trio.abc.ReceiveStream = trio.lowlevel.FdStream(stdout)
        self.stderr: trio.abc.ReceiveStream = trio.lowlevel.FdStream(stderr)
        self.pid: int | None = None  # in the sandbox's PID namespace
        self.returncode: int | None = None
        self.message: str | None = None  # why it ended when the sandbox did
        self._exited = trio.Event()

    def _exit(self, code: int, message: str | None = None) -> None:
        if self.returncode is None:
            self.returncode, self.message = code, message
            self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    async def kill(self) -> None:
        """SIGKILL the exec's process group; wait for its end (bounded)."""
        if self.returncode is None:
            await self._sandbox.send({"op": "kill", "id": self.id})
            with trio.move_on_after(_KILL_WAIT_S):
                await self._exited.wait()
            self._exit(SANDBOX_GONE)


def _status(raw: int) -> int:
    if os.WIFSIGNALED(raw):
        return 128 + os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else 1


class WarmSandbox:
    """An instance's warm sandbox (one per `host.BuildHost`). *directory*: a hostd-owned
    directory for the agent's script (bound read-only into the sandbox). *on_line*: what
    the keeper and agent say (``devyard: ...``), e.g. a limit they enforced."""

    def __init__(
        self,
        config: Callable[[], SandboxConfig],
        *,
        directory: Path,
        workspace: Path,
        gradle_home: Path,
        on_line: Callable[[str], None],
    ) -> None:
        self._config = config
        self.directory = directory
        self.workspace = workspace
        self.gradle_home = gradle_home
        self._on_line = on_line
        self._sock: trio.socket.SocketType | None = None
        self._send_lock = trio.Lock()
        self._start_lock = trio.Lock()
        self._procs: dict[str, WarmProcess] = {}
        self._ids = itertools.count(1)
        self._scope: trio.CancelScope | None = None
        self.keeper_pid: int | None = None
        self._said: collections.deque[str] = collections.deque(maxlen=8)
        self.starts = 0  # how many sandboxes this instance started (tests)
        self._closed = False

    @property
    def running(self) -> bool:
        return self._sock is not None

    async def spawn(
        self, nursery: trio.Nursery, argv: Sequence[str], env: Mapping[str, str], cwd: str
    ) -> WarmProcess:
        """Run *argv* (in the sandbox's terms) in the warm sandbox, started if it is not."""
        async with self._start_lock:
            if self._closed:
                raise WarmSandboxError("the instance is stopping")
            if self._sock is None:
                await nursery.start(self._run)
        full_env = dict(env)
        if self._config().proxy is not None:
            full_env.update(proxy_env())
        ident = str(next(self._ids))
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        process = WarmProcess(self, ident, out_read, err_read)
        self._procs[ident] = process
        request = {"op": "spawn", "id": ident, "argv": list(argv), "env": full_env, "cwd": cwd}
        try:
            await self.send(request, fds=(out_write, err_write))
        finally:
            os.close(out_write)
            os.close(err_write)
        return process

    async def send(self, request: dict[str, Any], fds: Sequence[int] = ()) -> None:
        data = json.dumps(request).encode()
        if len(data) > _MAX_MESSAGE * 64:
            raise WarmSandboxError("the exec's command line and environment are too large")
        message = struct.pack(">I", len(data)) + data
        async with self._send_lock:
            sock = self._sock
            if sock is None:
                self._gone(f"request {request.get('op')}")
                return
            try:
                ancillary = []
                if fds:
                    rights = array.array("i", fds).tobytes()
                    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)]
                sent = await sock.sendmsg([message[:4]], ancillary)
                view = memoryview(message)[sent:]
                while view:
                    view = view[await sock.send(view) :]
            except OSError as exc:
                log.info("the warm sandbox's agent is gone: %s", exc)

    def _gone(self, why: str) -> None:
        del why
        for process in list(self._procs.values()):
            process._exit(SANDBOX_GONE, "devyard: the build's sandbox ended")
        self._procs.clear()

    def _argv(self, fd: int, info_fd: int) -> list[str]:
        config = self._config()
        agent = [config.relay_python, "-I", f"{AGENT_DIR}/{KEEPER.name}", "agent", f"--fd={fd}"]
        return sandbox_argv(
            config,
            [*agent, "--"],
            workspace=self.workspace,
            gradle_home=self.gradle_home,
            cwd=WORKSPACE,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            info_fd=info_fd,
            ro_binds=[(self.directory, AGENT_DIR)],
        )

    def _prepare(self) -> None:
        self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o755)  # noqa: S103 - the build user reads the agent's script
        script = self.directory / KEEPER.name
        shutil.copyfile(KEEPER, script)
        os.chmod(script, 0o644)

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the sandbox, serve its agent until it ends or this is cancelled, then kill it."""
        await trio.to_thread.run_sync(self._prepare)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info_read, info_write = os.pipe()
        try:
            process = await trio.lowlevel.open_process(
                self._argv(theirs.fileno(), info_write),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(theirs.fileno(), info_write),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            )
        except OSError as exc:
            ours.close()
            raise WarmSandboxError(f"the warm sandbox did not start: {exc}") from exc
        finally:
            theirs.close()
            os.close(info_write)
        self.starts += 1
        self.keeper_pid = process.pid
        sock = trio.socket.from_stdlib_socket(ours)
        init: list[int] = []
        started = False
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                if self._closed:
                    nursery.cancel_scope.cancel()
                assert process.stdout is not None
                nursery.start_soon(self._read_output, process.stdout)
                nursery.start_soon(_read_init, info_read, init)
                ready = None
                with trio.move_on_after(_START_S):
                    ready = await _receive_line(sock, bytearray())
                if ready is not None and ready[0].get("ready"):
                    self._sock, started = sock, True
                    task_status.started()
                    await self._serve(sock, ready[1])
                nursery.cancel_scope.cancel()
        finally:
            self._sock = None
            self._scope = None
            self._gone("the sandbox ended")
            with trio.CancelScope(shield=True):
                for pid in init:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                sock.close()
                self.keeper_pid = None
        if not started:
            said = "; ".join(self._said) or f"exit status {process.returncode}"
            raise WarmSandboxError(f"the warm sandbox did not start: {said}")

    async def _serve(self, sock: trio.socket.SocketType, pending: bytearray) -> None:
        while (line := await _receive_line(sock, pending)) is not None:
            message, pending = line
            process = self._procs.get(str(message.get("id")))
            if process is None:
                continue
            if isinstance(message.get("pid"), int):
                process.pid = message["pid"]
            if isinstance(message.get("exit"), int):
                del self._procs[process.id]
                process._exit(_status(message["exit"]))

    async def _read_output(self, stream: trio.abc.ReceiveStream) -> None:
        pending = b""
        while data := await stream.receive_some(65536):
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._said_line(line.decode("utf-8", "replace"))
        if pending:
            self._said_line(pending.decode("utf-8", "replace"))

    def _said_line(self, line: str) -> None:
        self._said.append(line)
        self._on_line(line)

    def close(self) -> None:
        """Kill the sandbox (its daemons with it); the nursery that runs it waits for its end."""
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()


async def _receive_line(
    sock: trio.socket.SocketType, pending: bytearray
) -> tuple[dict[str, Any], bytearray] | None:
    while b"\n" not in pending:
        data = await sock.recv(65536)
        if not data:
            return None
        pending += data
        if len(pending) > _MAX_MESSAGE:
            return None
    line, _, rest = bytes(pending).partition(b"\n")
    try:
        value = json.loads(line)
    except ValueError:
        value = {}
    return (value if isinstance(value, dict) else {}), bytearray(rest)


async def _read_init(fd: int, init: list[int]) -> None:
    """bubblewrap's ``--info-fd`` JSON: the host PID of the sandbox's init, into *init*."""
    data = b""
    async with trio.lowlevel.FdStream(fd) as info:
        while len(data) < 4096 and (chunk := await info.receive_some(4096)):
            data += chunk
    with contextlib.suppress(ValueError, TypeError):
        init.append(int(json.loads(data)["child-pid"]))
