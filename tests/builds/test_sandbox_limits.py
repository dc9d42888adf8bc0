"""The build sandbox's bounds, on an in-process `BuildHost` (real bubblewrap, real processes):
memory and disk limits kill with a ``devyard:`` line, no network without an allowlist (a real
connect attempt), the allowlist proxy lets exactly the listed loopback server through, and a
SIGKILLed host daemon takes its builds with it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from devyard.core.build_network import parse_allowlist
from devyard.hostd.builds import BuildConfig, BuildHost, SandboxConfig, SandboxLimits
from devyard.hostd.builds.execs import Exec
from devyard.hostd.builds.sandbox import USR_LINKS
from devyard.hostd.builds.sandbox_net import serve_allowlist_proxy
from devyard.hostd.netpolicy import NetPolicy, parse_networks
from tests.polling import eventually
from tests.ports import free_port

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not os.path.exists("/usr/bin/python3"),
    reason="scripts/deps installs bubblewrap (and the host's python3 runs the relay)",
)
LOOPBACK = NetPolicy(allow=parse_networks(["127.0.0.0/8"]))


def _sandbox(**limits: int) -> SandboxConfig:
    links = tuple(d for d in USR_LINKS if os.path.islink(f"/{d}"))
    binds = tuple(d for d in USR_LINKS if os.path.isdir(f"/{d}") and d not in links)
    uid = 65534 if os.geteuid() == 0 else None
    return SandboxConfig(
        build_uid=uid, usr_links=links, ro_binds=binds, limits=SandboxLimits(**limits)
    )


@asynccontextmanager
async def _host(tmp_path: Path, sandbox: SandboxConfig) -> AsyncIterator[BuildHost]:
    config = BuildConfig(sandbox=sandbox, gradle_home=tmp_path / "home")
    async with trio.open_nursery() as nursery:
        host = BuildHost(tmp_path / "build", config, nursery)
        host.create()
        yield host
        host.close()


async def _run(host: BuildHost, line: str) -> tuple[Exec, str, str]:
    run = host.start({"command": "run", "commandLine": line, "timeoutSeconds": 60})
    with trio.fail_after(60):
        await run.done.wait()
    out = "\n".join(e.data for e in run.events if e.type == "stdout")
    err = "\n".join(e.data for e in run.events if e.type == "stderr")
    return run, out, err


async def test_memory_and_disk_limits_kill_the_build_and_say_so(tmp_path: Path) -> None:
    sandbox = _sandbox(memory_bytes=96 * 1024**2, disk_bytes=16 * 1024**2)
    async with _host(tmp_path, sandbox) as host:
        hog = "python3 -c 'import time; b = bytearray(400 << 20); time.sleep(60)'"
        run, _, err = await _run(host, hog)
        assert run.exit_code == 137, err
        assert "devyard: the build used" in err and "past its limit of 100663296" in err, err
        # a build that writes past the disk limit and goes on is killed while it runs...
        line = "for f in a b c; do head -c 8000000 /dev/zero > $f; done; sleep 60"
        run, _, err = await _run(host, line)
        assert run.exit_code == 137 and "past its disk limit of 16777216: killed" in err, err
        # ...and one that ends over its quota fails (the keeper measures once more at the end)
        run, _, err = await _run(host, "head -c 30000000 /dev/zero > big; echo wrote")
        assert run.exit_code != 0 and "past its disk limit of 16777216" in err, err
        run, out, _ = await _run(host, "rm -f a b c big; echo cleaned")
        assert run.exit_code == 0 and out == "cleaned"


async def _serve_hello(listeners: list[trio.SocketListener]) -> None:
    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            body = b"hello from the allowed server"
            head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            await stream.send_all(head + body)

    await trio.serve_listeners(answer, listeners)


_FETCH = textwrap.dedent(
    """\
    python3 - <<'EOF'
    import socket, sys, urllib.request
    try:
        print(urllib.request.urlopen("http://127.0.0.1:{port}/", timeout=10).read().decode())
    except Exception as exc:
        print("fetch failed:", exc)
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=5)
        print("direct: connected")
    except OSError as exc:
        print("direct:", exc.strerror)
    try:
        socket.create_connection(("{public}", 80), timeout=5)
        print("public: connected")
    except OSError as exc:
        print("public:", exc.strerror)
    EOF
    """
)


async def test_no_network_without_an_allowlist_and_only_the_allowlist_with_one(
    tmp_path: Path,
) -> None:
    port, other = free_port(), free_port()
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    script = _FETCH.format(port=port, public="192.0.2.1")
    async with trio.open_nursery() as servers:
        servers.start_soon(_serve_hello, listeners)
        # -- no allowlist: a real connect attempt fails (the sandbox has only its loopback) --
        async with _host(tmp_path / "closed", _sandbox()) as host:
            run, out, err = await _run(host, script)
        assert run.exit_code == 0, err
        assert "fetch failed" in out and "direct: Connection refused" in out, out
        assert "public: Network is unreachable" in out, out
        # -- an allowlist: the proxy lets the listed server through, and nothing else -------
        sock = tmp_path / "net" / "proxy.sock"
        entries = parse_allowlist([f"127.0.0.1:{port}"])
        await servers.start(serve_allowlist_proxy, sock, entries, lambda: LOOPBACK)
        sandbox = attrs.evolve(_sandbox(), proxy=sock)
        async with _host(tmp_path / "open", sandbox) as host:
            run, out, err = await _run(host, script)
            assert run.exit_code == 0, err
            assert "hello from the allowed server" in out, out
            assert "public: Network is unreachable" in out, out  # only through the proxy
            refused = f"curl -s -x http://127.0.0.1:3128 http://127.0.0.1:{other}/ || true"
            if shutil.which("curl"):
                _, out, _ = await _run(host, refused)
                assert f"127.0.0.1:{other} is not in this instance's spec.buildNetwork" in out
        servers.cancel_scope.cancel()


_FAKE_HOSTD = textwrap.dedent(
    """\
    import os, sys, trio
    from pathlib import Path
    from devyard.hostd.builds import BuildConfig, BuildHost
    from tests.builds.test_sandbox_limits import _sandbox

    async def main() -> None:
        root = Path(sys.argv[1])
        config = BuildConfig(sandbox=_sandbox(), gradle_home=root / "home")
        async with trio.open_nursery() as nursery:
            host = BuildHost(root / "build", config, nursery)
            host.create()
            run = host.start({"command": "run", "commandLine": "sleep 1000.5 & sleep 1000.25"})
            while run.last_id < 1:
                await trio.sleep(0.05)
            print("started", flush=True)
            await trio.sleep(3600)

    trio.run(main)
    """
)


def _sleepers() -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if handle.read() in (b"sleep\x001000.5\x00", b"sleep\x001000.25\x00"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def test_a_sigkilled_host_daemon_takes_its_builds_with_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", _FAKE_HOSTD, str(tmp_path)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout is not None
        with trio.fail_after(30):
            assert b"started" in await process.stdout.receive_some(100)
        await eventually(lambda: len(_sleepers()) == 2, seconds=20)
        # a worker thread of trio's forked the sandbox; it idles out after ~10 s, which the
        # kernel's parent-death signal would have followed: the keeper is not fooled by it
        process.send_signal(signal.SIGKILL)
        await process.wait()
        await eventually(lambda: _sleepers() == [], seconds=10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
