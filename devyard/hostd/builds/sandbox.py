"""The command line that runs one build inside bubblewrap (Debian ``bubblewrap``).

Pure: `sandbox_argv` only builds an argv. What the sandbox is:

- a new PID, IPC and UTS namespace (``--unshare-pid``): when the sandbox's init dies, the
  kernel kills every process left in it, also those that left the process group with
  ``setsid`` (the init runs in a session of its own: hostd learns its PID from
  ``--info-fd`` and kills it); ``--new-session`` keeps it off hostd's terminal. Not
  ``--die-with-parent``: its parent-death signal follows the *thread* that spawned
  bubblewrap, and trio spawns from a worker thread that exits when idle (it killed builds
  after ~10 s); hostd kills the tree itself on cancel, timeout and the instance's end;
- the network allowlist is still to come: ``network`` other than ``none`` is refused;
- no network (``--unshare-net``: only a loopback);
- the host's ``/usr`` and ``/etc`` read-only, a fresh ``/proc`` and ``/dev``, a private
  ``/tmp`` (tmpfs, 1777), the instance's workspace read-write at ``/workspace`` and the
  organization's Gradle user home read-write at ``/gradle-home``; nothing else of the host,
  so no other instance's files and no hostd data;
- resource bounds by ``prlimit`` (util-linux), hard limits set before the user changes: CPU
  seconds, data segment (RLIMIT_DATA: what the JVM heap commits), file size, open files;
- then, when hostd runs as root, ``setpriv`` drops to the unprivileged build user with no
  supplementary groups and every capability set cleared (bubblewrap sets no_new_privs).
  hostd not running as root needs no drop: bubblewrap then runs in a user namespace as
  hostd's own user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "GRADLE_HOME",
    "USR_LINKS",
    "WORKSPACE",
    "SandboxConfig",
    "SandboxLimits",
    "sandbox_argv",
]

WORKSPACE: Final = "/workspace"
GRADLE_HOME: Final = "/gradle-home"
#: Merged-/usr links made inside the sandbox when the host has the target.
USR_LINKS: Final = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@attrs.frozen
class SandboxLimits:
    cpu_seconds: int = 3600
    data_bytes: int = 4 * 1024**3
    file_bytes: int = 4 * 1024**3
    open_files: int = 4096


@attrs.frozen
class SandboxConfig:
    """*build_uid*/*build_gid*: the user builds run as when hostd is root (None: hostd's own
    user, without a drop). *usr_links*: which of ``/bin``, ``/lib``... the host has as links
    into ``/usr`` (the driver looks once)."""

    bwrap: str = "bwrap"
    prlimit: str = "prlimit"
    setpriv: str = "setpriv"
    build_uid: int | None = None
    build_gid: int | None = None
    limits: SandboxLimits = attrs.field(factory=SandboxLimits)
    usr_links: tuple[str, ...] = USR_LINKS
    ro_binds: tuple[str, ...] = ()  # top-level directories of a host without merged /usr


def sandbox_argv(
    config: SandboxConfig,
    command: Sequence[str],
    *,
    workspace: Path,
    gradle_home: Path,
    cwd: str = WORKSPACE,
    network: bool = False,
    env: Mapping[str, str] = {},
    info_fd: int | None = None,
) -> list[str]:
    """The argv running *command* in the sandbox, in *cwd* (a path inside it), with exactly
    *env* as its environment. *info_fd*: where bubblewrap writes ``{"child-pid": N}``, the
    host PID of the namespace's init (killing it kills the sandbox)."""
    argv = [config.bwrap, "--new-session", "--unshare-pid"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv.append("--unshare-net")
    argv += ["--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for link in config.usr_links:
        argv += ["--symlink", f"usr/{link}", f"/{link}"]
    for directory in config.ro_binds:
        argv += ["--ro-bind", f"/{directory}", f"/{directory}"]
    argv += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--tmpfs", "/tmp"]  # noqa: S108 - the sandbox's own tmpfs
    argv += ["--bind", str(workspace), WORKSPACE, "--bind", str(gradle_home), GRADLE_HOME]
    argv += ["--chdir", cwd, "--"]
    limits = config.limits
    argv += [
        config.prlimit,
        f"--cpu={limits.cpu_seconds}",
        f"--data={limits.data_bytes}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--",
    ]
    if config.build_uid is not None:
        gid = config.build_gid if config.build_gid is not None else config.build_uid
        argv += [
            config.setpriv,
            f"--reuid={config.build_uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]
    return argv + list(command)
