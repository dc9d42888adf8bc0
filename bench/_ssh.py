"""The `ssh_L` bench path: `ssh -L` to a throwaway OpenSSH server on loopback.

Entry = the `ssh` client's local forward listener, carrier = its one SSH connection, exit = the
`sshd` session process that dials the sink. Everything lives in a temporary directory: a fresh
host key, a fresh client key, its own sshd_config, known_hosts pinning the host key. The
system's ssh configuration is never read (`sshd -f`, `ssh -F none`) nor changed.

Running as root, OpenSSH insists on its privilege-separation directory /run/sshd (normally made
by the ssh service); we create that empty runtime directory when it is missing. As another
user, sshd runs without privilege separation's chroot and we log in as that same user, which
works only for an account that is not locked; otherwise the path is left out with the reason.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from bench._procs import Child, ChildError, spawn, wait_connectable

LOOPBACK: Final = "127.0.0.1"
SBIN_PATH: Final = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
START_TIMEOUT: Final = 15.0
REPO: Final = Path(__file__).resolve().parent.parent
# sshd and ssh cannot watch a pipe: a wrapper ends them if the harness dies (bench/_lifeline.py)
LIFELINE: Final = (sys.executable, "-m", "bench._lifeline")


class SshUnavailable(Exception):
    """OpenSSH is missing or would not start here; the message says why."""


def _free_port() -> int:
    """A loopback port free right now (sshd and ssh -L cannot report a port they chose)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "devyard-bench", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _prepare(workdir: Path) -> tuple[str, str, int]:
    """Keys and config in `workdir`; returns (sshd path, user, sshd port)."""
    sshd = shutil.which("sshd", path=SBIN_PATH)
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        raise SshUnavailable("OpenSSH not installed (Debian: openssh-server, openssh-client)")
    if os.geteuid() == 0:
        try:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        except OSError as exc:
            raise SshUnavailable(f"cannot create /run/sshd: {exc}") from exc
    try:
        _keygen(workdir / "host_key")
        _keygen(workdir / "client_key")
    except (OSError, subprocess.SubprocessError) as exc:
        raise SshUnavailable(f"ssh-keygen failed: {exc}") from exc
    user = getpass.getuser()
    port = _free_port()
    (workdir / "authorized_keys").write_bytes((workdir / "client_key.pub").read_bytes())
    host_pub = (workdir / "host_key.pub").read_text().split()
    (workdir / "known_hosts").write_text(f"[{LOOPBACK}]:{port} {host_pub[0]} {host_pub[1]}\n")
    (workdir / "sshd_config").write_text(
        "\n".join(
            [
                f"ListenAddress {LOOPBACK}:{port}",
                f"HostKey {workdir / 'host_key'}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                "PidFile none",
                "StrictModes no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                f"AllowUsers {user}",
                "AllowTcpForwarding local",
                "PermitTTY no",
                "X11Forwarding no",
                "UseDNS no",
                "PrintMotd no",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    return sshd, user, port


@asynccontextmanager
async def open_ssh_forward(sink: tuple[str, int], logdir: Path) -> AsyncIterator[tuple[str, int]]:
    """Start sshd and `ssh -N -L`; yield the forward's local address; stop both on exit."""
    async with AsyncExitStack() as stack:
        # mkdtemp's mode 0700: sshd and ssh refuse keys others can read.
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ssh-", dir=logdir)))
        sshd_path, user, sshd_port = _prepare(workdir)
        local_port = _free_port()
        sshd = await stack.enter_async_context(
            spawn(
                "sshd",
                [*LIFELINE, sshd_path, "-D", "-e", "-f", str(workdir / "sshd_config")],
                logdir=logdir,
                cwd=REPO,
            )
        )
        await _wait_up(sshd, LOOPBACK, sshd_port)
        ssh_argv = [
            "ssh", "-N", "-F", "none",
            "-i", str(workdir / "client_key"),
            "-p", str(sshd_port),
            "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={workdir / 'known_hosts'}",
            "-o", "UpdateHostKeys=no",
            "-o", "ExitOnForwardFailure=yes",
            "-o", "LogLevel=ERROR",
            "-L", f"{LOOPBACK}:{local_port}:{sink[0]}:{sink[1]}",
            f"{user}@{LOOPBACK}",
        ]  # fmt: skip
        # Registered after sshd, so it is ended first: closing the connection ends sshd's
        # per-connection child (which left sshd's process group), then sshd itself.
        ssh = await stack.enter_async_context(
            spawn("ssh", [*LIFELINE, *ssh_argv], logdir=logdir, cwd=REPO)
        )
        await _wait_up(ssh, LOOPBACK, local_port)
        yield LOOPBACK, local_port


async def _wait_up(child: Child, host: str, port: int) -> None:
    with trio.move_on_after(START_TIMEOUT):
        try:
            await wait_connectable(host, port, child)
        except ChildError as exc:
            raise SshUnavailable(str(exc)) from exc
        return
    raise SshUnavailable(f"{child.name} not listening after {START_TIMEOUT:.0f} s")


__all__ = ["SshUnavailable", "open_ssh_forward"]
