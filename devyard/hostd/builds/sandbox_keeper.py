"""The process between hostd and a build's sandbox, and the build's in-sandbox proxy relay.

A standalone script (standard library only: it runs as ``python -I sandbox_keeper.py``, and
the relay inside the sandbox with the host's ``/usr/bin/python3``); `sandbox.sandbox_argv`
puts it in front of the command line. Two modes:

``keep --parent PID [--limits...] -- ARGV``: hostd's child. It

- sets the resource limits (``setrlimit``: CPU seconds, data segment, file size, open files)
  and, on Linux, makes its child die with it (``PR_SET_PDEATHSIG``, SIGKILL: the keeper is
  single-threaded, so the signal follows the keeper itself, not a thread of hostd's);
- watches hostd (``pidfd_open``): when hostd dies, however (SIGKILL too), the keeper kills the
  sandbox and exits, so no build outlives its host daemon;
- on a cgroup v2 host (``--cgroup DIR``) puts the sandbox in a cgroup of its own with
  ``memory.max`` (no swap), ``cpu.max`` and ``pids.max``, and reports an OOM kill; otherwise
  polls the resident memory of the sandbox's process tree (``/proc``) and kills it past
  ``--memory``;
- polls the workspace's disk use (``--workspace``, ``--disk``) and kills the build past it,
  once more after the build ended (a build that ended over its quota fails);
- exits with its child's status (128 + N for a signal), a limit it enforced said on stderr
  (``devyard: ...``), which the exec's event stream carries.

``redact --secrets FILE -- ARGV``: runs ARGV with its stdout and stderr through the keeper,
each line with every secret of *FILE* (one a line; the file is removed once read) replaced
by ``***`` (the xcode driver's signing material; never in an event, a log or an artifact).

``agent --fd N --``: the long-lived process of an instance's warm sandbox (``warm.py``),
inside bubblewrap, as the build user. On the socket *N* (one end of a socketpair hostd made:
nothing in the sandbox can connect to it) hostd sends ``[u32 BE length][JSON]`` requests:
``{op: spawn, id, argv, env, cwd}`` with the exec's stdout and stderr pipes attached
(``SCM_RIGHTS``) runs *argv* in a session of its own; ``{op: kill, id}`` SIGKILLs that session's
process group. The agent answers JSON lines: ``{ready}``, then ``{id, pid}`` and ``{id, exit}``
(the raw wait status) per exec, after killing what is left in the exec's process group (a
Gradle daemon detaches into a session of its own, so it stays). hostd closing the socket
ends the agent and every exec's group.

``relay --port N --socket PATH -- ARGV``: inside a sandbox with an allowlist: serves
``127.0.0.1:N`` (the sandbox's own loopback; ``http_proxy`` points there) by relaying every
connection to hostd's filtering proxy on the Unix socket *PATH*, runs ARGV, exits with it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.25
_DISK_EVERY_S = 1.0


def _say(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"devyard: {message}\n".encode())


def _status(raw: int) -> int:
    if os.WIFSIGNALED(raw):
        return 128 + os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else 1


def _pdeathsig() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _tree_rss(root: int) -> int:
    """Resident bytes of *root* and its descendants (Linux ``/proc``; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def _disk_use(root: str) -> int:
    """Bytes allocated under *root* (links not followed)."""
    total, todo = 0, [root]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return total


class _Cgroup:
    """A cgroup v2 directory for one sandbox (None of its writes may fail silently: the
    keeper falls back to polling when the cgroup cannot be made)."""

    def __init__(self, parent: str, memory: int, cpus: float, pids: int) -> None:
        self.path = os.path.join(parent, f"build-{os.getpid()}")
        control = os.path.join(parent, "cgroup.subtree_control")
        with contextlib.suppress(OSError), open(control, "w") as handle:  # for our children
            handle.write("+memory +cpu +pids")
        os.mkdir(self.path)
        self._write("memory.max", str(memory))
        with contextlib.suppress(OSError):
            self._write("memory.swap.max", "0")
        if cpus > 0:
            self._write("cpu.max", f"{round(cpus * 100000)} 100000")
        self._write("pids.max", str(pids))

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as handle:
            handle.write(value)

    def join(self, pid: int) -> None:
        self._write("cgroup.procs", str(pid))

    def oom_kills(self) -> int:
        events = os.path.join(self.path, "memory.events")
        with contextlib.suppress(OSError, ValueError), open(events) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self._write("cgroup.kill", "1")
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.01)


def _keep(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if os.getppid() != args.parent:
        _say("hostd is gone: the build does not start")
        return 125
    hostd = os.pidfd_open(args.parent) if hasattr(os, "pidfd_open") else None
    cgroup = None
    if args.cgroup:
        try:
            cgroup = _Cgroup(args.cgroup, args.memory, args.cpus, args.pids)
        except OSError as exc:
            _say(f"no cgroup ({exc.strerror}): memory is bounded by polling")
    limits = (
        (resource.RLIMIT_CPU, args.cpu_seconds),
        (resource.RLIMIT_DATA, args.data),
        (resource.RLIMIT_FSIZE, args.fsize),
        (resource.RLIMIT_NOFILE, args.nofile),
    )
    keeper = os.getpid()
    read_go, write_go = os.pipe()
    child = os.fork()
    if child == 0:  # the sandbox: limits, death with the keeper, then exec
        try:
            os.close(write_go)
            _pdeathsig()
            if os.getppid() != keeper:
                os._exit(125)
            os.read(read_go, 1)  # after the keeper put us in the cgroup
            if args.chdir:
                os.chdir(args.chdir)
            for which, value in limits:
                if value > 0:
                    resource.setrlimit(which, (value, value))
            os.execvp(argv[0], list(argv))  # noqa: S606 - argv is hostd's
        except OSError as exc:
            _say(f"the sandbox did not start: {exc}")
        os._exit(127)
    os.close(read_go)
    if cgroup is not None:
        try:
            cgroup.join(child)
        except OSError as exc:
            _say(f"no cgroup ({exc.strerror}): memory is bounded by polling")
            cgroup.remove()
            cgroup = None
    os.write(write_go, b"g")
    os.close(write_go)
    try:
        return _watch(args, child, hostd, cgroup)
    finally:
        if cgroup is not None:
            cgroup.remove()


def _kill(args: argparse.Namespace, child: int, message: str) -> int:
    """Kill the build, say why. In bubblewrap the child dies, and with it (its
    ``--die-with-parent``) the sandbox's init and so the whole PID namespace. Without
    (``--group-kill``: direct mode) the build's processes are in the keeper's process group,
    which hostd kills on cancel; the keeper kills that group, itself included."""
    _say(message)
    if args.group_kill:
        os.killpg(0, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    return 137


def _watch(args: argparse.Namespace, child: int, hostd: int | None, cgroup: _Cgroup | None) -> int:
    own = os.pidfd_open(child) if hostd is not None else None
    watched = [fd for fd in (hostd, own) if fd is not None]
    next_disk = 0.0
    while True:
        ready, _, _ = select.select(watched, [], [], _POLL_S) if watched else ([], [], [])
        if not watched:
            time.sleep(_POLL_S)  # no pidfd (macOS): hostd's death shows as a new parent
        if (hostd is not None and hostd in ready) or os.getppid() != args.parent:
            return _kill(args, child, "hostd went away: the build was killed")
        pid, raw = os.waitpid(child, os.WNOHANG)
        if pid == child:
            code = _status(raw)
            if cgroup is not None and cgroup.oom_kills():
                _say(f"the build ran out of memory (limit {args.memory} bytes): killed")
                return 137
            if args.workspace and args.disk > 0:
                used = _disk_use(args.workspace)
                if used > args.disk:
                    _say(f"the workspace holds {used} bytes, past its disk limit of {args.disk}")
                    return code or 1
            if code == 128 + signal.SIGXFSZ:
                _say(f"the build wrote a file past the file-size limit ({args.fsize} bytes)")
            elif code == 128 + signal.SIGXCPU:
                _say(f"the build used its CPU time limit ({args.cpu_seconds} s): killed")
            return code
        if cgroup is None and args.memory > 0:
            used = _tree_rss(child)
            if used > args.memory:
                return _kill(
                    args,
                    child,
                    f"the build used {used} bytes of memory, past its limit of "
                    f"{args.memory}: killed",
                )
        now = time.monotonic()
        if args.workspace and args.disk > 0 and now >= next_disk:
            next_disk = now + _DISK_EVERY_S
            used = _disk_use(args.workspace)
            if used > args.disk:
                return _kill(
                    args,
                    child,
                    f"the workspace reached {used} bytes, past its disk limit of "
                    f"{args.disk}: killed",
                )


def _pump(source: socket.socket, dest: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            dest.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dest.shutdown(socket.SHUT_WR)


def _serve(connection: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        connection.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, connection), daemon=True)
    back.start()
    _pump(connection, upstream)
    back.join()
    connection.close()
    upstream.close()


def _accept(listener: socket.socket, path: str) -> None:
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=_serve, args=(connection, path), daemon=True).start()


def _relay(args: argparse.Namespace, argv: Sequence[str]) -> int:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    child = os.fork()
    if child == 0:
        listener.close()
        try:
            os.execvp(argv[0], list(argv))  # noqa: S606 - argv is hostd's
        except OSError as exc:
            _say(f"the command did not start: {exc}")
        os._exit(127)
    threading.Thread(target=_accept, args=(listener, args.socket), daemon=True).start()
    return _status(os.waitpid(child, 0)[1])


class _Agent:
    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.sock.set_inheritable(False)
        self.lock = threading.Lock()
        self.groups: dict[str, int] = {}

    def say(self, message: dict[str, object]) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self.lock, contextlib.suppress(OSError):
            self.sock.sendall(data)

    def read(self) -> tuple[dict[str, object], list[int]] | None:
        head, fds, _, _ = socket.recv_fds(self.sock, 4, 2)
        while head and len(head) < 4:
            more = self.sock.recv(4 - len(head))
            if not more:
                return None
            head += more
        if len(head) < 4:
            return None
        size, body = int.from_bytes(head, "big"), b""
        while len(body) < size:
            more = self.sock.recv(min(65536, size - len(body)))
            if not more:
                return None
            body += more
        value = json.loads(body)
        return (value if isinstance(value, dict) else {}), list(fds)

    def spawn(self, request: dict[str, object], fds: list[int]) -> None:
        ident = str(request.get("id"))
        raw_argv, raw_env = request.get("argv"), request.get("env")
        argv = [str(a) for a in raw_argv] if isinstance(raw_argv, list) else []
        env = {str(k): str(v) for k, v in raw_env.items()} if isinstance(raw_env, dict) else {}
        cwd = str(request.get("cwd") or "/")
        if len(fds) != 2 or not argv:
            for fd in fds:
                os.close(fd)
            self.say({"id": ident, "exit": 127 << 8})
            return
        child = os.fork()
        if child == 0:
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                for source, target in ((null, 0), (fds[0], 1), (fds[1], 2)):
                    os.dup2(source, target)
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)  # noqa: S606 - argv is hostd's
            except OSError as exc:
                _say(f"the command did not start: {exc}")
            os._exit(127)
        for fd in fds:
            os.close(fd)
        self.groups[ident] = child
        self.say({"id": ident, "pid": child})
        threading.Thread(target=self.reap, args=(ident, child), daemon=True).start()

    def reap(self, ident: str, child: int) -> None:
        raw = os.waitpid(child, 0)[1]
        with contextlib.suppress(OSError):  # what the exec left in its group goes with it
            os.killpg(child, signal.SIGKILL)
        self.groups.pop(ident, None)
        self.say({"id": ident, "exit": raw})

    def kill(self, ident: str) -> None:
        group = self.groups.get(ident)
        if group is not None:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)


def _agent(args: argparse.Namespace, argv: Sequence[str]) -> int:
    del argv
    agent = _Agent(args.fd)
    agent.say({"ready": True})
    while True:
        try:
            message = agent.read()
        except (OSError, ValueError):
            message = None
        if message is None:  # hostd closed: nothing of this instance may run on
            for group in list(agent.groups.values()):
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            return 0
        request, fds = message
        if request.get("op") == "spawn":
            agent.spawn(request, fds)
        else:
            for fd in fds:
                os.close(fd)
            if request.get("op") == "kill":
                agent.kill(str(request.get("id")))


def _redacted(data: bytes, secrets: Sequence[bytes]) -> bytes:
    for secret in secrets:
        data = data.replace(secret, b"***")
    return data


def _redact(args: argparse.Namespace, argv: Sequence[str]) -> int:
    try:
        with open(args.secrets, "rb") as handle:
            found = handle.read().split(b"\n")
        os.unlink(args.secrets)
    except OSError as exc:
        _say(f"no secrets to redact ({exc.strerror}): the build does not start")
        return 125
    secrets = sorted((s for s in found if len(s) >= 4), key=len, reverse=True)
    pipes = [os.pipe(), os.pipe()]
    child = os.fork()
    if child == 0:
        for target, (read, write) in zip((1, 2), pipes, strict=True):
            os.dup2(write, target)
            os.close(read)
            os.close(write)
        try:
            os.execvp(argv[0], list(argv))  # noqa: S606 - argv is hostd's
        except OSError as exc:
            _say(f"the command did not start: {exc}")
        os._exit(127)
    sources = {}
    for target, (read, write) in zip((1, 2), pipes, strict=True):
        os.close(write)
        sources[read] = (target, bytearray())
    while sources:
        ready, _, _ = select.select(list(sources), [], [])
        for fd in ready:
            target, pending = sources[fd]
            data = os.read(fd, 65536)
            if data:
                pending += data
                cut = pending.rfind(b"\n") + 1 if len(pending) < 65536 else len(pending)
            else:
                cut = len(pending)
                del sources[fd]
                os.close(fd)
            if cut:
                out = memoryview(_redacted(bytes(pending[:cut]), secrets))
                with contextlib.suppress(OSError):
                    while out:
                        out = out[os.write(target, out) :]
                del pending[:cut]
    return _status(os.waitpid(child, 0)[1])


def main(argv: Sequence[str]) -> int:
    if "--" not in argv:
        _say("sandbox_keeper: usage: keep|relay|redact|agent [options] -- command...")
        return 2
    split = list(argv).index("--")
    options, command = list(argv[:split]), list(argv[split + 1 :])
    parser = argparse.ArgumentParser(prog="sandbox_keeper")
    modes = parser.add_subparsers(dest="mode", required=True)
    keep = modes.add_parser("keep")
    keep.add_argument("--parent", type=int, required=True)
    keep.add_argument("--cpu-seconds", type=int, default=0)
    keep.add_argument("--data", type=int, default=0)
    keep.add_argument("--fsize", type=int, default=0)
    keep.add_argument("--nofile", type=int, default=0)
    keep.add_argument("--memory", type=int, default=0)
    keep.add_argument("--cpus", type=float, default=0.0)
    keep.add_argument("--pids", type=int, default=4096)
    keep.add_argument("--cgroup", default="")
    keep.add_argument("--workspace", default="")
    keep.add_argument("--disk", type=int, default=0)
    keep.add_argument("--chdir", default="")
    keep.add_argument("--group-kill", action="store_true")
    relay = modes.add_parser("relay")
    relay.add_argument("--port", type=int, required=True)
    relay.add_argument("--socket", required=True)
    redact = modes.add_parser("redact")
    redact.add_argument("--secrets", required=True)
    agent = modes.add_parser("agent")
    agent.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(options)
    if not command and args.mode != "agent":
        _say("sandbox_keeper: no command")
        return 2
    run = {"keep": _keep, "relay": _relay, "redact": _redact, "agent": _agent}[args.mode]
    return run(args, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
