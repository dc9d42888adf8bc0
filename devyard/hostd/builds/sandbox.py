"""The command line that runs one build: the keeper, then (on Linux) bubblewrap.

Pure: `sandbox_argv` only builds an argv. ``sandbox_keeper.py`` comes first (hostd's child,
run by hostd's own Python): it sets the resource limits (``setrlimit``), makes the sandbox die
with hostd (``PR_SET_PDEATHSIG`` on its single thread, and a ``pidfd`` watch of hostd: the
kernel's parent-death signal follows the *thread* that forked, and trio forks from worker
threads that exit when idle, so neither ``--die-with-parent`` nor a pdeathsig set from hostd
would do), bounds memory (a cgroup v2 of its own when `SandboxConfig.cgroup` names a writable
cgroup v2 directory; else by polling the tree's resident memory) and disk (polling the
workspace's allocated bytes), and says which limit it enforced. Then, in bubblewrap:

- ``--die-with-parent`` (its parent is the keeper, whose single thread lives as long as it);
- a new PID, IPC and UTS namespace (``--unshare-pid``): when the sandbox's init dies, the
  kernel kills every process left in it, also those that left the process group with
  ``setsid`` (the init runs in a session of its own: hostd learns its PID from
  ``--info-fd`` and kills it); ``--new-session`` keeps it off hostd's terminal;
- no network (``--unshare-net``: only a loopback). With an allowlist (`SandboxConfig.proxy`)
  hostd's filtering proxy (``sandbox_net.py``) listens on a Unix socket bound into the
  sandbox, and the keeper's ``relay`` mode (the host's ``/usr/bin/python3``, in the sandbox)
  serves it on the sandbox's ``127.0.0.1:3128``; ``http_proxy``/``https_proxy`` and the
  JVM's proxy properties point there;
- the host's ``/usr`` and ``/etc`` read-only, a fresh ``/proc`` and ``/dev``, a private
  ``/tmp`` (tmpfs, 1777, at most `SandboxLimits.tmp_bytes`), the instance's workspace
  read-write at ``/workspace`` and the organization's Gradle user home read-write at
  ``/gradle-home``; nothing else of the host, so no other instance's files and no hostd data;
- then, when hostd runs as root, ``setpriv`` drops to the unprivileged build user with no
  supplementary groups and every capability set cleared (bubblewrap sets no_new_privs).
  hostd not running as root needs no drop: bubblewrap then runs in a user namespace as
  hostd's own user.

``SandboxConfig.bwrap = None`` is the *direct* mode (macOS hosts, where there is no
bubblewrap; the xcode driver): the keeper runs the command itself in the real workspace, with
the same limits, death with hostd and disk quota, but no namespaces; `SandboxConfig.wrapper`
confines it (the xcode driver's ``sandbox-exec`` profile, which also holds the network rule),
and with an allowlist the relay serves the proxy on the host's ``127.0.0.1:proxy_port``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "GRADLE_HOME",
    "KEEPER",
    "PROXY_PORT",
    "USR_LINKS",
    "WORKSPACE",
    "SandboxConfig",
    "SandboxLimits",
    "proxy_env",
    "sandbox_argv",
]

WORKSPACE: Final = "/workspace"
GRADLE_HOME: Final = "/gradle-home"
#: Merged-/usr links made inside the sandbox when the host has the target.
USR_LINKS: Final = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: The keeper script (standard library only; see its docstring).
KEEPER: Final = Path(__file__).with_name("sandbox_keeper.py")
#: Where the allowlist proxy answers inside the sandbox (its own loopback).
PROXY_PORT: Final = 3128
_NET_DIR: Final = "/run/devyard"


@attrs.frozen
class SandboxLimits:
    """Per exec (one exec runs at a time per instance, so per instance). 0 turns one off.
    *memory_bytes*: resident memory of the whole tree (cgroup ``memory.max``, else polled);
    *data_bytes*: each process's data segment (RLIMIT_DATA: what the JVM heap commits);
    *disk_bytes*: the workspace's allocated bytes (polled); *tmp_bytes*: the private /tmp;
    *cpus*: cgroup ``cpu.max`` in CPUs (cgroup v2 only); *pids*: cgroup ``pids.max``."""

    cpu_seconds: int = 3600
    data_bytes: int = 4 * 1024**3
    file_bytes: int = 4 * 1024**3
    open_files: int = 4096
    memory_bytes: int = 6 * 1024**3
    disk_bytes: int = 20 * 1024**3
    tmp_bytes: int = 2 * 1024**3
    cpus: float = 0.0
    pids: int = 4096


@attrs.frozen
class SandboxConfig:
    """*build_uid*/*build_gid*: the user builds run as when hostd is root (None: hostd's own
    user, without a drop). *usr_links*: which of ``/bin``, ``/lib``... the host has as links
    into ``/usr`` (the driver looks once). *bwrap* None: direct mode (no bubblewrap).
    *cgroup*: a cgroup v2 directory hostd may make children in ("" : none, poll instead).
    *proxy*: the allowlist proxy's Unix socket on the host (None: no network at all); its
    directory is bound into the sandbox (``sandbox_net.serve_allowlist_proxy`` makes it).
    *python*: runs the keeper (hostd's interpreter); *relay_python*: runs the relay inside
    the sandbox (the host's, under ``/usr``)."""

    bwrap: str | None = "bwrap"
    setpriv: str = "setpriv"
    build_uid: int | None = None
    build_gid: int | None = None
    limits: SandboxLimits = attrs.field(factory=SandboxLimits)
    usr_links: tuple[str, ...] = USR_LINKS
    ro_binds: tuple[str, ...] = ()  # top-level directories of a host without merged /usr
    cgroup: str = ""
    proxy: Path | None = None
    python: str = sys.executable
    relay_python: str = "/usr/bin/python3"
    #: Direct mode: the argv prefix that confines the build (the xcode driver's
    #: ``sandbox-exec -f PROFILE``), and the loopback port of the allowlist relay.
    wrapper: tuple[str, ...] = ()
    proxy_port: int = PROXY_PORT


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    """The environment that sends a build's HTTP(S) through the allowlist proxy."""
    url = f"http://127.0.0.1:{port}"
    java = " ".join(
        f"-D{scheme}.proxyHost=127.0.0.1 -D{scheme}.proxyPort={port}"
        for scheme in ("http", "https")
    )
    return {
        "http_proxy": url,
        "https_proxy": url,
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "JAVA_TOOL_OPTIONS": java + " -Dhttp.nonProxyHosts=",
    }


def _keeper(config: SandboxConfig, workspace: Path) -> list[str]:
    limits = config.limits
    return [
        config.python,
        "-I",
        str(KEEPER),
        "keep",
        f"--parent={os.getpid()}",
        f"--cpu-seconds={limits.cpu_seconds}",
        f"--data={limits.data_bytes}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        f"--memory={limits.memory_bytes}",
        f"--cpus={limits.cpus}",
        f"--pids={limits.pids}",
        f"--cgroup={config.cgroup}",
        f"--workspace={workspace}",
        f"--disk={limits.disk_bytes}",
        "--",
    ]


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
    ro_binds: Sequence[tuple[Path, str]] = (),
) -> list[str]:
    """The argv running *command* in the sandbox, in *cwd* (a path inside it), with exactly
    *env* as its environment. *info_fd*: where bubblewrap writes ``{"child-pid": N}``, the
    host PID of the namespace's init (killing it kills the sandbox). In direct mode *cwd* and
    *env* name ``/workspace`` and are rewritten to the real workspace, and *info_fd* is
    unused. *network* is the exec's ask for the network: builds only reach the allowlist.
    *ro_binds*: more host directories, read-only, at the sandbox paths given (warm.py)."""
    del network  # no build reaches the network except through the allowlist proxy
    keeper = _keeper(config, workspace)
    if config.bwrap is None:
        real = str(workspace)
        direct_env = {k: v.replace(WORKSPACE, real) for k, v in env.items()}
        where = real + cwd.removeprefix(WORKSPACE) if cwd.startswith(WORKSPACE) else cwd
        keeper[-1:] = [f"--chdir={where}", "--group-kill", "--"]
        host_relay: list[str] = []
        if config.proxy is not None:  # the relay on the host's loopback, at the instance's port
            direct_env.update(proxy_env(config.proxy_port))
            host_relay = [config.python, "-I", str(KEEPER), "relay"]
            host_relay += [f"--port={config.proxy_port}", f"--socket={config.proxy}", "--"]
        wrapper = list(config.wrapper)
        return [*keeper, *wrapper, "env", "-i", *_pairs(direct_env), *host_relay, *command]
    argv = [*keeper, config.bwrap, "--new-session", "--die-with-parent", "--unshare-pid"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net"]
    argv += ["--clearenv"]
    full_env = dict(env)
    if config.proxy is not None:
        full_env.update(proxy_env())
    for name, value in full_env.items():
        argv += ["--setenv", name, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for link in config.usr_links:
        argv += ["--symlink", f"usr/{link}", f"/{link}"]
    for directory in config.ro_binds:
        argv += ["--ro-bind", f"/{directory}", f"/{directory}"]
    argv += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777"]
    if config.limits.tmp_bytes > 0:
        argv += ["--size", str(config.limits.tmp_bytes)]
    argv += ["--tmpfs", "/tmp"]  # noqa: S108 - the sandbox's own tmpfs
    argv += ["--bind", str(workspace), WORKSPACE, "--bind", str(gradle_home), GRADLE_HOME]
    for source, target in ro_binds:  # its parent searchable by the build user
        argv += ["--perms", "0755", "--dir", os.path.dirname(target)]
        argv += ["--ro-bind", str(source), target]
    relay: list[str] = []
    if config.proxy is not None:
        # the proxy's directory: its socket and a world-readable copy of the keeper
        argv += [
            "--perms",
            "0755",
            "--dir",
            "/run",
            "--ro-bind",
            str(config.proxy.parent),
            _NET_DIR,
        ]
        relay = [config.relay_python, "-I", f"{_NET_DIR}/{KEEPER.name}", "relay"]
        relay += [f"--port={PROXY_PORT}", f"--socket={_NET_DIR}/{config.proxy.name}", "--"]
    argv += ["--chdir", cwd, "--"]
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
    return argv + relay + list(command)


def _pairs(env: Mapping[str, str]) -> list[str]:
    return [f"{name}={value}" for name, value in env.items()]
