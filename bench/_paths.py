"""The bench paths of `python -m bench mux`: how each one's entry and exit are started.

Every path has the tunnel's shape: load client -> entry listener -> (one carrier connection
holding all streams; one TCP connection per stream for trio_proxy) -> exit -> sink, with entry
and exit in separate processes:

    direct      client -> sink, nothing between: what client and sink can do at most
    trio_proxy  plain trio TCP proxy, entry and exit (bench/_trio_proxy.py): the Python ceiling
    mux_tcp     devyard.core session over one TCP carrier (bench/_mux_tunnel.py)
    mux_ws      devyard.core session over one WebSocket carrier (trio-websocket)
    go_yamux    hashicorp/yamux over one TCP carrier (bench/goyamux, modes entry / exit)
    ssh_L       `ssh -N -L` to a throwaway loopback sshd (bench/_ssh.py)
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from bench._procs import Child, spawn
from bench._ssh import SshUnavailable, open_ssh_forward

PATHS: Final = ("direct", "trio_proxy", "mux_tcp", "mux_ws", "go_yamux", "ssh_L")
REPO: Final = Path(__file__).resolve().parent.parent
START_TIMEOUT: Final = 20.0


class PathUnavailable(Exception):
    """This path cannot run here; the message says why (it is left out of the results)."""


@dataclass(frozen=True)
class Context:
    go: Path
    sink: tuple[str, int]
    logdir: Path


@dataclass(frozen=True)
class RunningPath:
    """A started path: where the load client connects, and the processes that must stay up."""

    name: str
    address: tuple[str, int]
    children: list[Child] = field(default_factory=list)

    def dead(self) -> Child | None:
        return next((c for c in self.children if c.process.returncode is not None), None)


def addr(host_port: tuple[str, int]) -> str:
    return f"{host_port[0]}:{host_port[1]}"


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    return env


@asynccontextmanager
async def _entry_exit(
    ctx: Context,
    name: str,
    exit_argv: Sequence[str],
    entry_argv: Callable[[str], Sequence[str]],
) -> AsyncIterator[RunningPath]:
    """Start the exit, then the entry pointed at the exit's carrier listener."""
    env = _python_env()
    async with AsyncExitStack() as stack:
        with trio.fail_after(START_TIMEOUT):
            exit_ = await stack.enter_async_context(
                spawn(f"{name}-exit", exit_argv, logdir=ctx.logdir, cwd=REPO, env=env)
            )
            carrier = await exit_.wait_listen()
            entry = await stack.enter_async_context(
                spawn(
                    f"{name}-entry", entry_argv(addr(carrier)), logdir=ctx.logdir, cwd=REPO, env=env
                )
            )
            address = await entry.wait_listen()
        yield RunningPath(name, address, [entry, exit_])


def _require_core() -> None:
    try:
        core = importlib.import_module("devyard.core")
    except ImportError as exc:
        raise PathUnavailable(f"devyard.core does not import: {exc}") from exc
    if not hasattr(core, "open_session"):
        raise PathUnavailable("devyard.core has no open_session yet")


@asynccontextmanager
async def open_path(name: str, ctx: Context) -> AsyncIterator[RunningPath]:
    """Start `name`'s entry and exit; stop them when the block exits."""
    py = sys.executable
    sink = addr(ctx.sink)
    if name == "direct":
        yield RunningPath(name, ctx.sink)
    elif name == "trio_proxy":
        module = "bench._trio_proxy"
        async with _entry_exit(
            ctx,
            name,
            [py, "-m", module, "exit", "--sink", sink],
            lambda carrier: [py, "-m", module, "entry", "--carrier", carrier],
        ) as running:
            yield running
    elif name in {"mux_tcp", "mux_ws"}:
        _require_core()
        kind = name.removeprefix("mux_")
        module = "bench._mux_tunnel"
        async with _entry_exit(
            ctx,
            name,
            [py, "-m", module, "exit", "--carrier", kind, "--sink", sink],
            lambda carrier: [py, "-m", module, "entry", "--carrier", kind, "--connect", carrier],
        ) as running:
            yield running
    elif name == "go_yamux":
        go = str(ctx.go)
        async with _entry_exit(
            ctx,
            name,
            [go, "exit", "-lifeline", "-listen", "127.0.0.1:0", "-sink", sink],
            lambda carrier: [
                go,
                "entry",
                "-lifeline",
                "-listen",
                "127.0.0.1:0",
                "-carrier",
                carrier,
            ],
        ) as running:
            yield running
    elif name == "ssh_L":
        async with AsyncExitStack() as stack:
            try:
                address = await stack.enter_async_context(open_ssh_forward(ctx.sink, ctx.logdir))
            except SshUnavailable as exc:
                raise PathUnavailable(str(exc)) from exc
            yield RunningPath(name, address)
    else:
        raise PathUnavailable(f"unknown path {name!r} (have: {', '.join(PATHS)})")
