"""The keeper's cgroup v2 path, on a cgroup2 hierarchy mounted for the test in a mount
namespace of its own (``unshare -m`` + ``mount -t cgroup2 none DIR``, as root).

Where the hierarchy has the ``memory``, ``cpu`` and ``pids`` controllers, a build runs in a
cgroup of its own with ``memory.max``, ``cpu.max`` and ``pids.max`` written, and an OOM kill
is reported. On a machine whose controllers are held by cgroup v1 hierarchies (this one:
``/proc/cgroups`` lists memory, cpu and pids in v1 hierarchies, and a controller lives in one
hierarchy at a time) the cgroup2 mount has none of them: that test skips, saying so with what
the mount offers, and the fallback is tested instead (the keeper says it has no cgroup and
bounds memory by polling)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devyard.hostd.builds.sandbox import KEEPER

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="mounting a cgroup2 hierarchy needs root and unshare (util-linux)",
)
WANTED = {"memory", "cpu", "pids"}
HOG = "import time; b = bytearray(200 << 20); time.sleep(30)"


def _in_cgroup2(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run the shell *script* in a new mount namespace where ``$CG`` is a cgroup2 mount."""
    mount = tmp_path / "cgroup2"
    mount.mkdir(exist_ok=True)
    line = f"mount -t cgroup2 none {mount} || exit 99\nCG={mount}\n{script}"
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", line],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _controllers(tmp_path: Path) -> set[str]:
    probe = _in_cgroup2(tmp_path, 'cat "$CG/cgroup.controllers"')
    if probe.returncode == 99:
        pytest.skip(f"unshare -m; mount -t cgroup2 none DIR failed: {probe.stderr.strip()}")
    assert probe.returncode == 0, probe.stderr
    return set(probe.stdout.split())


def _v1_holders() -> str:
    with contextlib.suppress(OSError), open("/proc/cgroups") as handle:
        rows = [line.split() for line in handle if not line.startswith("#")]
        held = [f"{r[0]} in v1 hierarchy {r[1]}" for r in rows if r[0] in WANTED and r[1] != "0"]
        return ", ".join(held)
    return "unknown"


def _keeper(mount_var: str, command: str) -> str:
    """The keeper's command line with its cgroup parent under the mount (a shell fragment)."""
    return (
        f'mkdir -p "{mount_var}/devyard"\n'
        f"exec {sys.executable} -I {KEEPER} keep --parent=$PPID_OF_TEST --memory={96 << 20} "
        f'--pids=64 --cpus=0.5 --cgroup="{mount_var}/devyard" -- {command}'
    )


def _run_keeper(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    script = f"PPID_OF_TEST={os.getpid()}\n" + _keeper("$CG", command)
    return _in_cgroup2(tmp_path, script)


def test_the_cgroup_v2_limits_are_written_and_an_oom_kill_is_reported(tmp_path: Path) -> None:
    offered = _controllers(tmp_path)
    if not offered >= WANTED:
        pytest.skip(
            "a cgroup2 hierarchy mounts here (unshare -m; mount -t cgroup2 none DIR) but its "
            f"cgroup.controllers offers only {sorted(offered) or 'nothing'}: "
            f"{_v1_holders()} (a controller is in one hierarchy at a time, so memory.max, "
            "cpu.max and pids.max do not exist in it)"
        )
    show = textwrap.dedent(
        """\
        sh -c 'cg=$(sed -n "s/^0:://p" /proc/self/cgroup); cd "$CG$cg" &&
        cat memory.max pids.max cpu.max'
        """
    ).replace("\n", " ")
    shown = _run_keeper(tmp_path, show)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [str(96 << 20), "64", "50000", "100000"], shown.stdout
    hog = _run_keeper(tmp_path, f"{sys.executable} -c '{HOG}'")
    assert hog.returncode == 137 and "ran out of memory" in hog.stderr, hog.stderr


def test_a_cgroup2_hierarchy_without_the_controllers_falls_back_to_polling(
    tmp_path: Path,
) -> None:
    offered = _controllers(tmp_path)
    if offered >= WANTED:
        pytest.skip("this machine's cgroup2 has the controllers: the v2 test covers it")
    hog = _run_keeper(tmp_path, f"{sys.executable} -c '{HOG}'")
    assert hog.returncode == 137, hog.stderr
    assert "devyard: no cgroup (" in hog.stderr, hog.stderr  # memory.max is not there
    assert "): memory is bounded by polling" in hog.stderr, hog.stderr
    assert "the build used" in hog.stderr and f"past its limit of {96 << 20}" in hog.stderr
