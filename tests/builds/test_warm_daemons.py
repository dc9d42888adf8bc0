"""The warm sandbox under Gradle's daemons: what one exec leaves detached (as a daemon is)
serves the next exec of the same instance and is invisible to every other instance's, dies
with the instance, and is bounded by the instance's memory limit (an idle process past it
takes the sandbox down; the next exec starts a fresh one). A `BuildHost` in this process,
real bubblewrap. The real Gradle daemon's reuse is in test_gradle_build (one real Gradle
run for the suite)."""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from devyard.hostd.builds import BuildHost, SandboxLimits
from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.gradle import GradleConfig
from tests.polling import eventually

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("bwrap", "gradle", "java")),
    reason="scripts/deps installs bubblewrap, gradle and the JDK",
)


@asynccontextmanager
async def _host(tmp_path: Path, name: str, org: str, **limits: int) -> AsyncIterator[BuildHost]:
    spec = DeviceSpec(Platform.GRADLE, name, tmp_path / "instances" / name, organization_id=org)
    config = GradleConfig(limits=SandboxLimits(**limits)).build_config(spec)
    async with trio.open_nursery() as nursery:
        host = BuildHost(tmp_path / name, config, nursery)
        await trio.to_thread.run_sync(host.create)
        try:
            yield host
        finally:
            host.close()


async def _sh(host: BuildHost, nursery: trio.Nursery, line: str) -> tuple[int, str]:
    assert host.warm is not None
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    process = await host.warm.spawn(nursery, ["/bin/sh", "-c", line], env, "/workspace")
    with trio.fail_after(60):
        code = await process.wait()
        out = await process.stdout.receive_some(65536)
    await process.stdout.aclose()
    await process.stderr.aclose()
    return code, bytes(out).decode()


_DETACH = textwrap.dedent(
    """\
    python3 - devyard-left-marker <<'EOF'
    import os, time
    r, w = os.pipe()
    if os.fork():
        os.read(r, 1)
        print(open("/tmp/left.pid").read())
        raise SystemExit
    os.setsid()  # out of the exec's group, as a Gradle daemon goes
    open("/tmp/left.pid", "w").write(str(os.getpid()))
    for fd in (0, 1, 2):
        os.close(fd)
    os.write(w, b"x")
    time.sleep(600)
    EOF
    """
)


#: How many processes of the sandbox carry the detached one's marker (never this one).
_COUNT = (
    "python3 -c \"import os; m = b'devyard-left' + b'-marker'; "
    "print(sum(m in open(f'/proc/{p}/cmdline', 'rb').read() "
    "for p in os.listdir('/proc') if p.isdigit()))\""
)


async def test_a_detached_process_serves_the_instances_next_exec_and_no_other(
    tmp_path: Path,
) -> None:
    async with (
        _host(tmp_path, "inst-a", "org-1") as first,
        _host(tmp_path, "inst-b", "org-1") as second,
        trio.open_nursery() as nursery,
    ):
        code, out = await _sh(first, nursery, _DETACH)
        assert code == 0 and out.strip().isdigit(), out
        pid = out.strip()
        # the next exec of the instance sees it (same sandbox, same /tmp, same PID namespace)
        code, out = await _sh(first, nursery, f"kill -0 {pid} && cat /tmp/left.pid")
        assert (code, out) == (0, pid), out
        # another instance of the same organization sees neither the process nor its /tmp
        assert await _sh(first, nursery, _COUNT) == (0, "1\n")
        assert await _sh(second, nursery, f"test ! -e /tmp/left.pid && {_COUNT}") == (0, "0\n")
        assert first.warm is not None and second.warm is not None
        keeper = first.warm.keeper_pid
        assert keeper is not None and first.warm.starts == 1
        first.close()
        # the instance's end takes the sandbox and what was left in it
        await eventually(lambda: not os.path.exists(f"/proc/{keeper}"))
        second.close()


async def test_an_idle_process_past_the_memory_limit_ends_the_warm_sandbox(
    tmp_path: Path,
) -> None:
    async with (
        _host(tmp_path, "inst-m", "org-1", memory_bytes=128 * 1024**2) as host,
        trio.open_nursery() as nursery,
    ):
        assert host.warm is not None
        # an exec leaves a detached process behind (as a Gradle daemon does), which then grows
        script = textwrap.dedent(
            """\
            python3 - <<'EOF'
            import os, time
            r, w = os.pipe()
            if os.fork():
                os.read(r, 1)
                print("left")
                raise SystemExit
            os.setsid()  # out of the exec's group, as a Gradle daemon goes
            for fd in (0, 1, 2):
                os.close(fd)
            os.write(w, b"x")
            time.sleep(0.5)
            b = bytearray(300 << 20)
            time.sleep(600)
            EOF
            """
        )
        code, out = await _sh(host, nursery, script)
        assert code == 0 and out == "left\n", out
        assert host.warm.keeper_pid is not None

        warm = host.warm
        await eventually(lambda: warm.keeper_pid is None, 30)
        code, out = await _sh(host, nursery, "echo again")
        assert code == 0 and out == "again\n", out
        assert host.warm.starts == 2
        host.close()
