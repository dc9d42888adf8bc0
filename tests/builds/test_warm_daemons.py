"""Warm Gradle daemons: an instance's Gradle execs join its warm sandbox, so the second
``gradle build`` reuses the daemon the first started (Debian's real Gradle and JDK); the
daemon is the instance's alone and dies with it; the warm sandbox is bounded as a whole by
the instance's memory limit (an idle process past it takes the sandbox down, the next exec
starts a fresh one). A `BuildHost` in this process, real bubblewrap."""

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
from devyard.hostd.builds.execs import Exec
from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.gradle import GradleConfig
from tests.polling import eventually

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("bwrap", "gradle", "java")),
    reason="scripts/deps installs bubblewrap, gradle and the JDK",
)


def _descendants(root: int) -> dict[int, str]:
    """PID -> command line of *root*'s descendants (host /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid:
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as handle:
                        found[child] = handle.read().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                todo.append(child)
    return found


def _daemons(host: BuildHost) -> set[int]:
    assert host.warm is not None
    keeper = host.warm.keeper_pid
    if keeper is None:
        return set()
    return {pid for pid, line in _descendants(keeper).items() if "GradleDaemon" in line}


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


def _project(root: Path) -> None:
    (root / "settings.gradle").write_text("rootProject.name = 'warm'\n")
    (root / "build.gradle").write_text("apply plugin: 'java'\n")
    source = root / "src/main/java/demo"
    source.mkdir(parents=True)
    (source / "Hello.java").write_text("package demo; public class Hello {}\n")


async def _exec(host: BuildHost, body: dict[str, object]) -> tuple[Exec, str]:
    run = host.start(body)
    with trio.fail_after(240):
        await run.done.wait()
    return run, "\n".join(e.data for e in run.events if e.type in ("stdout", "stderr"))


async def test_the_second_build_reuses_the_instances_daemon_which_dies_with_it(
    tmp_path: Path,
) -> None:
    async with _host(tmp_path, "inst-a", "org-1") as host:
        _project(host.workspace.root)
        build: dict[str, object] = {"command": "gradlebuild", "tasks": ["jar"]}
        first, out = await _exec(host, build)
        assert first.exit_code == 0, out
        assert "Starting a Gradle Daemon" in out, out
        assert first.events[0].data.startswith("gradle --daemon "), first.events[0]
        daemons = _daemons(host)
        assert len(daemons) == 1, daemons  # it outlived the exec, in the instance's sandbox
        second, out = await _exec(host, build)
        assert second.exit_code == 0, out
        assert "Starting a Gradle Daemon" not in out, out
        assert _daemons(host) == daemons  # the same JVM served the second build
        assert host.warm is not None and host.warm.starts == 1
        # its registry is in the sandbox's own /tmp, not the organization's Gradle home
        assert not (host.config.gradle_home / "daemon").exists()
        host.close()

    # the instance is gone, and its daemon with it
    await eventually(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in daemons))


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
