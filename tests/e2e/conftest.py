"""The single-file connector, built in the background from the start of the session.

PyInstaller takes minutes of one core; most of the suite waits on sockets and subprocesses.
When a selected test asks for ``connector_build`` the build starts as soon as collection ends,
at a lower CPU priority, and the test waits for its result: the minutes overlap the rest of the
suite instead of adding to it (the CI budget, .ci/run).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from ._cli import clean_env

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1200.0  # s: generous; the build is niced and competes with the whole suite


@attrs.frozen
class ConnectorBuild:
    """A finished ``scripts/build-connector``: its exit code, stdout and stderr, and where the
    executable is (when it succeeded)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    executable: Path


@attrs.define
class _Background:
    process: subprocess.Popen[bytes]
    out_dir: Path
    stdout: Path
    stderr: Path


_KEY = pytest.StashKey[_Background]()


def pytest_collection_finish(session: pytest.Session) -> None:
    # after deselection (-k, -m): only when the test will run
    if not any("connector_build" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    config = session.config
    work = Path(tempfile.mkdtemp(prefix="devyard-connector-build-"))
    stdout, stderr = work / "stdout", work / "stderr"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(  # waited for by the fixture, killed at session end
            ["nice", "-n", "10", str(ROOT / "scripts" / "build-connector"), str(work / "dist")],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env={**clean_env(), "PYTHON": sys.executable},
        )
    config.stash[_KEY] = _Background(process, work / "dist", stdout, stderr)


def pytest_unconfigure(config: pytest.Config) -> None:
    background = config.stash.get(_KEY, None)
    if background is not None and background.process.poll() is None:
        background.process.kill()
        background.process.wait()


@pytest.fixture(scope="session")
def connector_build(pytestconfig: pytest.Config) -> Iterator[ConnectorBuild]:
    """The background build's result (waits for it, bounded)."""
    background = pytestconfig.stash[_KEY]
    try:
        returncode = background.process.wait(timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        background.process.kill()
        background.process.wait()
        pytest.fail(f"scripts/build-connector took more than {BUILD_TIMEOUT:.0f} s")
    yield ConnectorBuild(
        returncode,
        background.stdout.read_bytes(),
        background.stderr.read_bytes(),
        background.out_dir / "devyard-connector",
    )
    shutil.rmtree(background.out_dir.parent, ignore_errors=True)
