"""A throwaway PostgreSQL cluster for tests and benchmarks, from the distribution's binaries.

`TemporaryCluster.start()` runs ``initdb`` into a fresh temporary directory, starts
``postgres`` on 127.0.0.1 at a free high port with its unix socket in that directory (never
the system's), and `stop()` kills it (``pg_ctl stop -m immediate``) and removes the
directory. It is tuned for throwaway data: no fsync, no full-page writes, trust auth for a
superuser named ``devyard`` on loopback only. `create_database()` makes a fresh empty
database per test, which is much cheaper than a cluster per test.

PostgreSQL refuses to run as root. Run as root (CI), the cluster's processes run as the
``postgres`` system user that Debian's ``postgresql`` package creates, and the directory is
handed to it. Anything missing raises `ClusterUnavailable` with the reason, so a test
session can skip instead of failing obscurely.

Synchronous on purpose: test sessions and benchmark drivers start it outside any trio run.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import psycopg
from psycopg import sql

__all__ = ["ClusterUnavailable", "TemporaryCluster", "find_bindir", "temporary_cluster"]

SUPERUSER: Final = "devyard"
_SERVICE_USER: Final = "postgres"
_START_ATTEMPTS: Final = 3
_SETTINGS: Final = (
    "-c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    " -c synchronous_commit=off -c max_connections=300 -c shared_buffers=32MB"
)


class ClusterUnavailable(Exception):
    """No PostgreSQL cluster can be started here; the message says why."""


def find_bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: PATH first, then Debian's versioned directories
    (newest first)."""
    on_path = shutil.which("pg_ctl")
    if on_path is not None and shutil.which("initdb") is not None:
        return Path(on_path).resolve().parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for bindir in candidates:
        if (bindir / "pg_ctl").exists() and (bindir / "initdb").exists():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TemporaryCluster:
    """A running throwaway cluster. Make one with `start` (or `temporary_cluster`)."""

    def __init__(self, bindir: Path, root: Path, port: int, user: pwd.struct_passwd | None):
        self.bindir = bindir
        self.root = root
        self.port = port
        self._user = user
        self._names = itertools.count(1)

    def __repr__(self) -> str:
        return f"<TemporaryCluster 127.0.0.1:{self.port} {self.root}>"

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        return self.root / "postgres.log"

    @classmethod
    def start(cls) -> TemporaryCluster:
        bindir = find_bindir()
        if bindir is None:
            raise ClusterUnavailable(
                "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's "
                "`postgresql` package (scripts/deps does)"
            )
        user = None
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam(_SERVICE_USER)
            except KeyError:
                raise ClusterUnavailable(
                    f"running as root and no {_SERVICE_USER!r} system user to run PostgreSQL"
                ) from None
        root = Path(tempfile.mkdtemp(prefix="devyard-pg-"))
        cluster = cls(bindir, root, 0, user)
        try:
            if user is not None:
                os.chown(root, user.pw_uid, user.pw_gid)
            cluster._run(
                "initdb", "-D", str(cluster.datadir), "-U", SUPERUSER, "--auth=trust",
                "-E", "UTF8", "--no-locale", "--no-sync",
            )  # fmt: skip
            cluster._start()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cluster

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        as_user = self._user
        # Our own binaries and arguments; the exit status is checked below, with the output.
        done = subprocess.run(  # noqa: S603, PLW1510
            command,
            capture_output=True,
            text=True,
            cwd=self.root,
            user=None if as_user is None else as_user.pw_uid,
            group=None if as_user is None else as_user.pw_gid,
            extra_groups=None if as_user is None else [],
        )
        if done.returncode != 0:
            raise ClusterUnavailable(
                f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
            )

    def _start(self) -> None:
        error: ClusterUnavailable | None = None
        for _ in range(_START_ATTEMPTS):  # the free port may be taken before we bind it
            self.port = _free_port()
            options = f"-p {self.port} -k {self.root} {_SETTINGS}"
            try:
                self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.logfile),
                          "-o", options, "-w", "-t", "60", "start")  # fmt: skip
                return
            except ClusterUnavailable as exc:
                error = exc
        log = self.logfile.read_text(errors="replace")[-2000:] if self.logfile.exists() else ""
        raise ClusterUnavailable(f"{error}\n{log}")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URL. Takes a few hundred milliseconds."""
        name = name or f"db_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def create_schema(self, dbname: str = "postgres") -> str:
        """A new empty schema in ``dbname``; a URL whose connections use it (through
        ``search_path``) as if it were a fresh database. Takes milliseconds: what a test
        wants. Advisory locks and roles are still shared across the database."""
        name = f"schema_{next(self._names)}"
        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        return f"{self.url(dbname)}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def temporary_cluster() -> Iterator[TemporaryCluster]:
    cluster = TemporaryCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
